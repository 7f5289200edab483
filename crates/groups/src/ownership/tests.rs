//! The coordinator over a shared store: two coordinators (two brokers) over one in-memory
//! store ([`MemoryStore`]), moving groups between them.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use sluice_log::ManualClock;
use sluice_protocol::kafka_protocol::ResponseError;
use uuid::Uuid;

use crate::assignor::{Assignment, TopicInfo};
use crate::errors::{GroupError, error_code, result_code};
use crate::store::CommittedOffset;
use crate::{Coordinator, GroupConfig, classic, consumer};

use super::GroupOwnership;
use super::memory::{MemoryOwner, MemoryStore};

const T0: i64 = 1_700_000_000_000;

/// Two brokers' coordinators over one in-memory store, on one manual clock.
struct Cluster {
    db: Arc<MemoryStore>,
    owners: [Arc<MemoryOwner>; 2],
    brokers: [Coordinator; 2],
}

impl Cluster {
    fn new() -> Cluster {
        let db = MemoryStore::new();
        let clock = ManualClock::new(T0);
        let mut config = GroupConfig::default();
        config.classic.initial_rebalance_delay_ms = 0;
        let owners = [db.owner(1), db.owner(2)];
        let brokers = owners.clone().map(|owner| {
            let owner: Arc<dyn GroupOwnership> = owner;
            Coordinator::with_ownership(config.clone(), Arc::new(clock.clone()), owner)
        });
        Cluster {
            db,
            owners,
            brokers,
        }
    }

    /// The group's lease runs out (its holder stopped renewing).
    fn expire(&self, group_id: &str) {
        assert!(self.db.holder(group_id).is_some(), "{group_id} has a lease");
        self.db.expire(group_id);
    }

    fn stored_offset(&self, group_id: &str) -> Option<i64> {
        self.db.committed(group_id, "t", 0)
    }
}

fn offset(n: i64) -> CommittedOffset {
    CommittedOffset {
        offset: n,
        leader_epoch: -1,
        metadata: None,
        commit_timestamp_ms: T0,
    }
}

/// A commit from outside any group protocol (an admin tool, a consumer using `assign`).
async fn commit(c: &Coordinator, group_id: &str, n: i64) -> Result<(), GroupError> {
    c.commit(group_id, "", None, -1, vec![("t".to_owned(), 0, offset(n))])
        .await
}

/// OffsetFetch of t-0 as the broker does it: own the group, then read.
async fn fetched(c: &Coordinator, group_id: &str) -> Result<Option<i64>, GroupError> {
    c.own_group(group_id).await?;
    let found = c.committed(group_id, None, Some(vec![("t".to_owned(), vec![0])]))?;
    Ok(found[0].1[0].1.as_ref().map(|o| o.offset))
}

fn code<T>(outcome: &Result<T, GroupError>) -> i16 {
    result_code(outcome)
}

fn listed(c: &Coordinator) -> Vec<String> {
    c.list().into_iter().map(|g| g.group_id).collect()
}

#[tokio::test]
async fn a_group_moves_and_the_old_coordinator_is_fenced_and_drops_it() {
    let cluster = Cluster::new();
    let [a, b] = &cluster.brokers;
    commit(a, "g", 5).await.unwrap();
    assert_eq!(cluster.stored_offset("g"), Some(5));
    assert_eq!(listed(a), vec!["g"]);

    // Held by broker 1: broker 2 answers NOT_COORDINATOR, naming the holder.
    let refused = commit(b, "g", 6).await;
    assert_eq!(
        refused,
        Err(GroupError::NotCoordinator {
            group_id: "g".into(),
            coordinator: Some(1),
        })
    );
    assert_eq!(code(&refused), ResponseError::NotCoordinator.code());
    assert_eq!(
        code(&fetched(b, "g").await),
        ResponseError::NotCoordinator.code()
    );
    assert!(listed(b).is_empty());

    // Broker 1's lease runs out; broker 2 takes the group over and sees its offsets.
    cluster.expire("g");
    assert_eq!(fetched(b, "g").await, Ok(Some(5)));
    assert_eq!(listed(b), vec!["g"]);

    // Broker 1 does not know yet: its next write is refused, and it drops the group.
    let fenced = commit(a, "g", 7).await;
    assert_eq!(
        code(&fenced),
        ResponseError::NotCoordinator.code(),
        "{fenced:?}"
    );
    assert!(listed(a).is_empty(), "the fenced broker dropped the group");
    assert_eq!(
        code(&fetched(a, "g").await),
        ResponseError::NotCoordinator.code(),
        "and sends its clients to the new coordinator"
    );
    assert_eq!(cluster.stored_offset("g"), Some(5), "nothing of it stored");

    // The new coordinator carries on.
    commit(b, "g", 8).await.unwrap();
    assert_eq!(fetched(b, "g").await, Ok(Some(8)));
    assert_eq!(cluster.stored_offset("g"), Some(8));
}

#[tokio::test]
async fn a_renewal_that_finds_the_group_gone_drops_it_and_answers_parked_members() {
    let cluster = Cluster::new();
    let [a, b] = &cluster.brokers;
    let join = |member_id: &str| classic::JoinRequest {
        member_id: member_id.to_owned(),
        group_instance_id: None,
        client_id: "c".into(),
        client_host: "/127.0.0.1".into(),
        protocol_type: "consumer".into(),
        protocols: vec![("range".into(), Bytes::from_static(b"m"))],
        session_timeout_ms: 10_000,
        rebalance_timeout_ms: 10_000,
        require_known_member_id: false,
        reason: None,
    };
    let first = a.join("g", join("")).await;
    assert_eq!(first.error, None);
    let m1 = first.member_id.clone();
    let synced = a
        .sync(
            "g",
            classic::SyncRequest {
                member_id: m1.clone(),
                group_instance_id: None,
                generation_id: first.generation_id,
                protocol_type: None,
                protocol_name: None,
                assignments: vec![(m1.clone(), Bytes::from_static(b"all"))],
            },
        )
        .await;
    assert_eq!(synced.error, None);

    // A second member joins: the rebalance waits for m1, so the join is parked.
    let mut parked = Box::pin(a.join("g", join("")));
    assert!(futures::poll!(&mut parked).is_pending());

    // Meanwhile the lease runs out and broker 2 takes the group over; broker 1's renewal
    // finds it gone.
    cluster.expire("g");
    b.own_group("g").await.unwrap();
    cluster.owners[0].renew();
    a.tick(&BTreeMap::new);
    let answer = parked.await;
    assert_eq!(
        error_code(answer.error.as_ref()),
        ResponseError::NotCoordinator.code(),
        "{answer:?}"
    );
    assert!(listed(a).is_empty());
    assert_eq!(
        code(&a.heartbeat("g", &m1, None, first.generation_id).await),
        ResponseError::NotCoordinator.code()
    );

    // The new coordinator restored the group from its snapshot, as recovery does: m1 is
    // still a member of its generation.
    let described = b.describe_classic("g").unwrap().expect("the group");
    let members: Vec<&str> = described
        .members
        .iter()
        .map(|m| m.member_id.as_str())
        .collect();
    assert_eq!(members, vec![m1.as_str()]);
    assert_eq!(
        b.heartbeat("g", &m1, None, first.generation_id).await,
        Ok(())
    );
}

#[tokio::test]
async fn a_consumer_group_resumes_its_epochs_at_the_new_coordinator() {
    let cluster = Cluster::new();
    let [a, b] = &cluster.brokers;
    let topic_id = Uuid::from_u128(7);
    let topics = BTreeMap::from([(
        topic_id,
        TopicInfo {
            name: "t".into(),
            id: topic_id,
            partitions: 2,
        },
    )]);
    let heartbeat = |epoch: i32, names: Option<Vec<String>>, owned: Option<Assignment>| {
        consumer::HeartbeatRequest {
            member_id: "m".into(),
            member_epoch: epoch,
            instance_id: None,
            rack_id: None,
            rebalance_timeout_ms: if epoch == 0 { 30_000 } else { -1 },
            subscribed_topic_names: names,
            subscribed_topic_regex: None,
            server_assignor: None,
            owned,
            client_id: "c".into(),
            client_host: "/127.0.0.1".into(),
        }
    };
    let joined = a
        .consumer_heartbeat("g", heartbeat(0, Some(vec!["t".into()]), None), &topics)
        .await;
    assert_eq!(joined.error, None, "{joined:?}");
    let assignment = joined.assignment.clone().expect("an assignment");
    assert_eq!(assignment[&topic_id].len(), 2);

    cluster.expire("g");
    cluster.owners[0].renew();
    let at_b = b
        .consumer_heartbeat(
            "g",
            heartbeat(joined.member_epoch, None, Some(assignment)),
            &topics,
        )
        .await;
    assert_eq!(at_b.error, None, "{at_b:?}");
    assert_eq!(at_b.member_epoch, joined.member_epoch);
    let described = b.describe_consumer("g", &topics).unwrap();
    assert_eq!(described.members.len(), 1);

    // Broker 1 learnt of the loss from its renewal: its member hears NOT_COORDINATOR.
    let at_a = a
        .consumer_heartbeat("g", heartbeat(joined.member_epoch, None, None), &topics)
        .await;
    assert_eq!(at_a.error_code(), ResponseError::NotCoordinator.code());
    assert!(listed(a).is_empty());
}

#[tokio::test]
async fn an_unavailable_store_is_retriable_and_a_group_is_taken_once() {
    let cluster = Cluster::new();
    let [a, _] = &cluster.brokers;
    cluster.db.set_down(true);
    let refused = commit(a, "g", 1).await;
    assert_eq!(
        code(&refused),
        ResponseError::CoordinatorNotAvailable.code(),
        "{refused:?}"
    );
    assert!(listed(a).is_empty());
    cluster.db.set_down(false);

    // Many requests at once for a group not held: one take between them.
    let takes = cluster.owners[0].takes();
    let commits: Vec<_> = (0..5).map(|n| commit(a, "g", n)).collect();
    for outcome in futures::future::join_all(commits).await {
        outcome.unwrap();
    }
    assert_eq!(cluster.owners[0].takes(), takes + 1);

    // A store failure on a write of a held group: retriable, nothing changes in memory.
    cluster.db.set_down(true);
    let refused = commit(a, "g", 99).await;
    assert_eq!(
        code(&refused),
        ResponseError::CoordinatorNotAvailable.code()
    );
    cluster.db.set_down(false);
    assert_ne!(fetched(a, "g").await, Ok(Some(99)));

    let bad = commit(a, "bad\0id", 1).await;
    assert_eq!(code(&bad), ResponseError::InvalidGroupId.code());
}

#[tokio::test]
async fn unused_leases_are_released_and_the_group_limit_holds() {
    let db = MemoryStore::new();
    let clock = ManualClock::new(T0);
    let config = GroupConfig {
        groups_max: 2,
        ..GroupConfig::default()
    };
    let owner = db.owner(1);
    let shared: Arc<dyn GroupOwnership> = owner.clone();
    let c = Coordinator::with_ownership(config, Arc::new(clock.clone()), shared);

    // OffsetFetch of groups nobody uses takes their leases...
    assert_eq!(fetched(&c, "x").await, Ok(None));
    assert_eq!(fetched(&c, "y").await, Ok(None));
    assert!(listed(&c).is_empty());
    // ...and at the limit, leases without state make room for a new group.
    commit(&c, "z", 1).await.unwrap();
    assert_eq!(listed(&c), vec!["z"]);
    assert_eq!(owner.held(), vec!["z"]);

    // A real group at the limit is refused.
    commit(&c, "w", 1).await.unwrap();
    let full = commit(&c, "v", 1).await;
    assert_eq!(code(&full), ResponseError::GroupMaxSizeReached.code());

    // Deleted groups keep their lease until the timer finds it unused for long enough.
    assert_eq!(c.delete_groups(&["w".to_owned()]).await, vec![Ok(())]);
    c.tick(&BTreeMap::new);
    assert!(owner.held().contains(&"w".to_owned()));
    clock.advance(crate::UNUSED_LEASE_KEEP_MS);
    c.tick(&BTreeMap::new);
    assert_eq!(owner.held(), vec!["z"]);

    // A clean shutdown releases every lease.
    c.release_all().await.unwrap();
    assert!(owner.held().is_empty());
    assert!(listed(&c).is_empty());
    assert!(!db.any_live_lease());
}

#[tokio::test]
async fn delete_groups_answers_per_group_when_one_moved() {
    let cluster = Cluster::new();
    let [a, b] = &cluster.brokers;
    commit(a, "g1", 1).await.unwrap();
    commit(a, "g2", 2).await.unwrap();
    // g2 moves to broker 2, which broker 1 has not noticed yet.
    cluster.expire("g2");
    b.own_group("g2").await.unwrap();
    let outcomes = a.delete_groups(&["g1".to_owned(), "g2".to_owned()]).await;
    let codes: Vec<i16> = outcomes.iter().map(result_code).collect();
    assert_eq!(codes, vec![0, ResponseError::NotCoordinator.code()]);
    assert!(listed(a).is_empty());
    assert_eq!(cluster.stored_offset("g1"), None);
    assert_eq!(cluster.stored_offset("g2"), Some(2), "not deleted");
    assert_eq!(fetched(b, "g2").await, Ok(Some(2)));
}
