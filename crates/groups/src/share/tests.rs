use std::collections::BTreeMap;

use uuid::Uuid;

use super::*;
use crate::assignor::TopicInfo;

fn topics(parts: &[(&str, i32)]) -> BTreeMap<Uuid, TopicInfo> {
    parts
        .iter()
        .enumerate()
        .map(|(i, &(name, partitions))| {
            let id = Uuid::from_u128(i as u128 + 1);
            (
                id,
                TopicInfo {
                    name: name.to_owned(),
                    id,
                    partitions,
                },
            )
        })
        .collect()
}

fn join(member: &str, topics: &[&str]) -> HeartbeatRequest {
    HeartbeatRequest {
        member_id: member.to_owned(),
        member_epoch: 0,
        rack_id: None,
        subscribed_topic_names: Some(topics.iter().map(|t| t.to_string()).collect()),
        client_id: "c".to_owned(),
        client_host: "/127.0.0.1".to_owned(),
    }
}

fn beat(member: &str, epoch: i32) -> HeartbeatRequest {
    HeartbeatRequest {
        member_epoch: epoch,
        subscribed_topic_names: None,
        ..join(member, &[])
    }
}

fn earliest() -> ShareSettings {
    ShareSettings {
        auto_offset_reset: AutoOffsetReset::Earliest,
        ..ShareSettings::default()
    }
}

fn group() -> ShareGroup {
    ShareGroup::new("g".to_owned(), earliest())
}

fn assigned(a: &Option<Assignment>) -> usize {
    a.as_ref().map_or(0, |a| a.values().map(|p| p.len()).sum())
}

#[test]
fn members_share_partitions_when_there_are_more_members_than_partitions() {
    let t = topics(&[("q", 2)]);
    let mut g = group();
    let mut epochs = BTreeMap::new();
    for m in ["a", "b", "c", "d", "e"] {
        let (r, changed) = g.heartbeat(0, join(m, &["q"]), &t);
        assert!(r.error.is_none(), "{r:?}");
        assert!(changed);
        epochs.insert(m, r.member_epoch);
    }
    // Everyone heartbeats once more at its epoch and gets the latest assignment.
    let mut per_partition = BTreeMap::new();
    for (m, epoch) in &epochs {
        let (r, _) = g.heartbeat(10, beat(m, *epoch), &t);
        assert!(r.error.is_none(), "{m}: {r:?}");
        assert_eq!(assigned(&r.assignment), 1, "{m}: one partition each");
        for parts in r.assignment.unwrap().values() {
            for p in parts {
                *per_partition.entry(*p).or_insert(0) += 1;
            }
        }
    }
    assert_eq!(per_partition, BTreeMap::from([(0, 3), (1, 2)]));
}

#[test]
fn fewer_members_than_partitions_split_them() {
    let t = topics(&[("q", 5)]);
    let mut g = group();
    g.heartbeat(0, join("a", &["q"]), &t);
    let (r, _) = g.heartbeat(0, join("b", &["q"]), &t);
    assert_eq!(assigned(&r.assignment), 2);
    let (r, _) = g.heartbeat(0, beat("a", 1), &t);
    assert!(r.error.is_none(), "{r:?}");
    assert_eq!(assigned(&r.assignment), 3);
}

#[test]
fn stale_epochs_are_fenced_and_unknown_members_refused() {
    let t = topics(&[("q", 1)]);
    let mut g = group();
    let (r, _) = g.heartbeat(0, join("a", &["q"]), &t);
    let (r2, _) = g.heartbeat(0, beat("a", r.member_epoch + 5), &t);
    assert!(matches!(r2.error, Some(GroupError::FencedMemberEpoch(_))));
    let (r3, _) = g.heartbeat(0, beat("x", 1), &t);
    assert!(matches!(r3.error, Some(GroupError::UnknownMemberId(_))));
    let (r4, _) = g.heartbeat(0, join("y", &[]), &t);
    assert!(matches!(r4.error, Some(GroupError::InvalidRequest(_))));
}

#[test]
fn a_member_whose_session_expires_is_removed_and_its_records_come_back() {
    let t = topics(&[("q", 1)]);
    let tp = (*t.keys().next().unwrap(), 0);
    let mut g = group();
    g.heartbeat(0, join("a", &["q"]), &t);
    g.heartbeat(0, join("b", &["q"]), &t);
    g.session("a", 0, &[tp], &[], true).unwrap();
    g.partition_mut(tp, 0, 10);
    let got = g.acquire(0, "a", tp, 10, 10);
    assert_eq!(
        got.iter()
            .map(|a| a.last_offset - a.first_offset + 1)
            .sum::<i64>(),
        10
    );
    // b keeps heartbeating; a goes silent.
    g.heartbeat(40_000, beat("b", 2), &t);
    assert!(g.tick(46_000, &t));
    assert_eq!(g.member_count(), 1);
    g.session("b", 0, &[tp], &[], true).unwrap();
    let again = g.acquire(46_000, "b", tp, 10, 10);
    assert_eq!(
        again.first().map(|a| (a.first_offset, a.delivery_count)),
        Some((0, 2))
    );
}

#[test]
fn fair_sharing_caps_each_fetcher_at_its_share_of_the_lock_budget() {
    let t = topics(&[("q", 1)]);
    let tp = (*t.keys().next().unwrap(), 0);
    let mut settings = earliest();
    settings.max_record_locks = 100;
    let mut g = ShareGroup::new("g".to_owned(), settings.clone());
    for m in ["a", "b", "c", "d"] {
        g.heartbeat(0, join(m, &["q"]), &t);
        g.session(m, 0, &[tp], &[], true).unwrap();
    }
    g.partition_mut(tp, 0, 1_000);
    let count = |v: &[Acquired]| {
        v.iter()
            .map(|a| a.last_offset - a.first_offset + 1)
            .sum::<i64>()
    };
    // Half the budget over four fetchers: the other half of the window holds records
    // acknowledged above older ones still being processed.
    assert_eq!(count(&g.acquire(0, "a", tp, 500, 1_000)), 13);
    assert!(g.at_cap("a", tp));
    assert_eq!(count(&g.acquire(0, "a", tp, 500, 1_000)), 0);
    for m in ["b", "c", "d"] {
        assert_eq!(count(&g.acquire(0, m, tp, 500, 1_000)), 13, "{m}");
    }
    // A member that closes its session gives its records and its share back.
    g.session("d", SESSION_CLOSE_EPOCH, &[], &[], true).unwrap();
    g.release_member("d");
    assert_eq!(g.member_cap(tp), Some(17));

    // Greedy (Kafka's behaviour): one fetch takes everything up to the window.
    settings.acquire_policy = AcquirePolicy::Greedy;
    let mut greedy = ShareGroup::new("g2".to_owned(), settings);
    greedy.heartbeat(0, join("a", &["q"]), &t);
    greedy.heartbeat(0, join("b", &["q"]), &t);
    greedy.session("a", 0, &[tp], &[], true).unwrap();
    greedy.session("b", 0, &[tp], &[], true).unwrap();
    greedy.partition_mut(tp, 0, 1_000);
    assert_eq!(count(&greedy.acquire(0, "a", tp, 500, 1_000)), 100);
    assert_eq!(count(&greedy.acquire(0, "b", tp, 500, 1_000)), 0);
}

#[test]
fn share_session_epochs_are_checked() {
    let t = topics(&[("q", 1)]);
    let tp = (*t.keys().next().unwrap(), 0);
    let mut g = group();
    g.heartbeat(0, join("a", &["q"]), &t);
    assert!(matches!(
        g.session("a", 3, &[], &[], true),
        Err(GroupError::ShareSessionNotFound(_))
    ));
    assert_eq!(
        g.session("a", 0, &[tp], &[], true).unwrap(),
        SessionOutcome::Open(vec![tp])
    );
    assert!(matches!(
        g.session("a", 2, &[], &[], true),
        Err(GroupError::InvalidShareSessionEpoch(_))
    ));
    assert_eq!(
        g.session("a", 1, &[], &[tp], true).unwrap(),
        SessionOutcome::Open(vec![])
    );
    assert_eq!(
        g.session("a", -1, &[], &[], false).unwrap(),
        SessionOutcome::Closed
    );
    assert!(matches!(
        g.session("z", 0, &[], &[], true),
        Err(GroupError::UnknownMemberId(_))
    ));
}

#[test]
fn acknowledged_records_survive_a_snapshot_and_acquired_ones_come_back() {
    let t = topics(&[("q", 1)]);
    let tp = (*t.keys().next().unwrap(), 0);
    let mut g = group();
    g.heartbeat(0, join("a", &["q"]), &t);
    g.session("a", 0, &[tp], &[], true).unwrap();
    g.partition_mut(tp, 0, 10);
    g.acquire(0, "a", tp, 10, 10);
    let (outcome, changed) = g.acknowledge(1, "a", tp, &[(0, 4, vec![1])]);
    assert!(outcome.is_ok() && changed);
    // Someone else's acknowledgement of a's records is refused.
    g.heartbeat(0, join("b", &["q"]), &t);
    let (outcome, _) = g.acknowledge(1, "b", tp, &[(5, 5, vec![1])]);
    assert!(matches!(outcome, Err(AckError::InvalidRecordState(_))));

    let snapshot = g.snapshot();
    let mut restored = ShareGroup::restore("g".to_owned(), earliest(), snapshot, 100, &t).unwrap();
    assert_eq!(restored.member_count(), 2);
    assert_eq!(restored.partition(tp).unwrap().start_offset(), 5);
    restored.session("a", 0, &[tp], &[], true).unwrap();
    let again = restored.acquire(100, "a", tp, 10, 10);
    assert_eq!(again.first().map(|a| a.first_offset), Some(5));
}

#[test]
fn a_member_that_leaves_can_still_acknowledge_and_close_its_session() {
    let t = topics(&[("q", 1)]);
    let tp = (*t.keys().next().unwrap(), 0);
    let mut g = group();
    g.heartbeat(0, join("a", &["q"]), &t);
    g.heartbeat(0, join("b", &["q"]), &t);
    g.session("a", 0, &[tp], &[], true).unwrap();
    g.partition_mut(tp, 0, 10);
    assert_eq!(g.acquire(0, "a", tp, 10, 10).len(), 1);
    // The leave heartbeat and the last acknowledgements go out together; the leave lands first.
    let (r, _) = g.heartbeat(1, beat("a", -1), &t);
    assert!(r.error.is_none(), "{r:?}");
    assert_eq!(g.member_count(), 1);
    // Fetching is over for it; acknowledging and closing are not.
    assert!(matches!(
        g.session("a", 1, &[], &[], true),
        Err(GroupError::UnknownMemberId(_))
    ));
    let (outcome, changed) = g.acknowledge(2, "a", tp, &[(0, 5, vec![1])]);
    assert!(outcome.is_ok() && changed, "{outcome:?}");
    assert_eq!(
        g.session("a", SESSION_CLOSE_EPOCH, &[], &[], false)
            .unwrap(),
        SessionOutcome::Closed
    );
    g.release_member("a");
    // What it did not acknowledge went back at the close; what it did never comes back.
    g.session("b", 0, &[tp], &[], true).unwrap();
    let got = g.acquire(3, "b", tp, 10, 10);
    assert_eq!(
        got.first().map(|a| (a.first_offset, a.last_offset)),
        Some((6, 9))
    );
}

#[test]
fn a_member_that_leaves_without_closing_its_session_releases_after_a_lock_duration() {
    let t = topics(&[("q", 1)]);
    let tp = (*t.keys().next().unwrap(), 0);
    let mut g = group();
    g.heartbeat(0, join("a", &["q"]), &t);
    g.heartbeat(0, join("b", &["q"]), &t);
    g.session("a", 0, &[tp], &[], true).unwrap();
    g.partition_mut(tp, 0, 4);
    g.acquire(0, "a", tp, 10, 4);
    g.heartbeat(1_000, beat("a", -1), &t);
    g.session("b", 0, &[tp], &[], true).unwrap();
    assert!(g.acquire(2_000, "b", tp, 10, 4).is_empty());
    let lock = g.settings().record_lock_duration_ms;
    assert!(g.next_deadline().is_some_and(|d| d <= 1_000 + lock));
    g.tick(1_000 + lock, &t);
    let got = g.acquire(1_000 + lock, "b", tp, 10, 4);
    assert_eq!(
        got.first().map(|a| (a.first_offset, a.delivery_count)),
        Some((0, 2))
    );
}

#[test]
fn resetting_an_empty_group_drops_what_departed_members_still_hold() {
    let t = topics(&[("q", 1)]);
    let tp = (*t.keys().next().unwrap(), 0);
    let mut g = group();
    g.heartbeat(0, join("a", &["q"]), &t);
    g.session("a", 0, &[tp], &[], true).unwrap();
    g.partition_mut(tp, 0, 4);
    assert!(!g.acquire(0, "a", tp, 10, 4).is_empty());
    // Left with its share session still open: the group is empty, its records still held.
    g.heartbeat(1_000, beat("a", -1), &t);
    assert_eq!(g.member_count(), 0);
    assert!(g.has_session_owner("a"));
    g.reset_offset(tp, 2).unwrap();
    assert!(!g.has_session_owner("a"));
    assert_eq!(g.next_deadline(), None);
    // Nor does the departed member block DeleteShareGroupOffsets.
    g.heartbeat(2_000, join("c", &["q"]), &t);
    g.session("c", 0, &[tp], &[], true).unwrap();
    g.partition_mut(tp, 2, 4);
    assert!(!g.acquire(2_000, "c", tp, 10, 4).is_empty());
    g.heartbeat(3_000, beat("c", -1), &t);
    assert_eq!(g.delete_offset(tp), Ok(true));
    assert!(!g.has_session_owner("c"));
}
