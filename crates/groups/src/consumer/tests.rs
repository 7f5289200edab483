//! Unit tests of the consumer group state machine, with the helpers they share (a simulated
//! set of clients); the tests themselves are in `tests/`, by concern.

use sluice_protocol::kafka_protocol::ResponseError;

use super::*;

mod membership;
mod reconcile;
mod state;

const SESSION_MS: i32 = 45_000;
const INTERVAL_MS: i32 = 5_000;
const REBALANCE_MS: i32 = 30_000;

fn config(members_max: usize) -> ConsumerConfig {
    ConsumerConfig {
        session_timeout_ms: SESSION_MS,
        heartbeat_interval_ms: INTERVAL_MS,
        members_max,
        default_assignor: AssignorKind::Uniform,
    }
}

fn parts(topic_id: Uuid, partitions: &[i32]) -> Assignment {
    BTreeMap::from([(topic_id, partitions.iter().copied().collect())])
}

fn count(a: &Assignment) -> usize {
    a.values().map(BTreeSet::len).sum()
}

fn join_req(member_id: &str, names: &[&str]) -> HeartbeatRequest {
    HeartbeatRequest {
        member_id: member_id.to_string(),
        member_epoch: JOIN_EPOCH,
        instance_id: None,
        rack_id: None,
        rebalance_timeout_ms: REBALANCE_MS,
        subscribed_topic_names: Some(names.iter().map(|n| n.to_string()).collect()),
        subscribed_topic_regex: None,
        server_assignor: None,
        owned: Some(Assignment::new()),
        client_id: "client".to_string(),
        client_host: "/127.0.0.1".to_string(),
    }
}

/// A regular heartbeat: only the epoch and (optionally) the owned partitions.
fn hb_req(member_id: &str, epoch: i32, owned: Option<Assignment>) -> HeartbeatRequest {
    HeartbeatRequest {
        member_epoch: epoch,
        rebalance_timeout_ms: REBALANCE_TIMEOUT_UNSET,
        subscribed_topic_names: None,
        owned,
        ..join_req(member_id, &[])
    }
}

/// A consumer as the broker sees it: what it was last told, and what it owns (it adopts
/// every assignment at once: revokes and takes partitions before its next heartbeat).
#[derive(Debug, Clone)]
struct Client {
    id: String,
    epoch: i32,
    owned: Assignment,
}

/// The group, the broker's topics and a clock, with the invariant checks every test gets.
struct World {
    group: ConsumerGroup,
    topics: BTreeMap<Uuid, TopicInfo>,
    now: i64,
    persists: usize,
}

impl World {
    fn new() -> World {
        World::with_config(config(100))
    }

    fn with_config(config: ConsumerConfig) -> World {
        World {
            group: ConsumerGroup::new("g".to_string(), config),
            topics: BTreeMap::new(),
            now: 1_000_000,
            persists: 0,
        }
    }

    fn create_topic(&mut self, n: u128, name: &str, partitions: i32) -> Uuid {
        let id = Uuid::from_u128(n);
        let info = TopicInfo {
            name: name.to_string(),
            id,
            partitions,
        };
        self.topics.insert(id, info);
        id
    }

    fn send(&mut self, req: HeartbeatRequest) -> HeartbeatResult {
        let mut effects = Vec::new();
        let result = self
            .group
            .heartbeat(self.now, req, &self.topics, &mut effects);
        assert!(effects.len() <= 1);
        self.persists += effects.len();
        assert_eq!(result.heartbeat_interval_ms, INTERVAL_MS);
        if result.error_code() != 0 {
            assert!(effects.is_empty(), "a refused request persisted something");
            assert!(result.assignment.is_none());
        }
        self.check_invariants();
        result
    }

    fn tick(&mut self) -> Vec<Effect> {
        let mut effects = Vec::new();
        self.group.tick(self.now, &self.topics, &mut effects);
        self.persists += effects.len();
        self.check_invariants();
        effects
    }

    /// Joins and returns the client, which adopted its first assignment.
    fn join(&mut self, req: HeartbeatRequest) -> Client {
        let result = self.send(req.clone());
        assert_eq!(result.error_code(), 0, "{:?}", result.error_message());
        let assignment = result
            .assignment
            .expect("a join is always told its assignment");
        Client {
            id: result.member_id,
            epoch: result.member_epoch,
            owned: assignment,
        }
    }

    /// One regular heartbeat from `client` with its owned partitions; it adopts the answer.
    fn poll(&mut self, client: &mut Client) -> HeartbeatResult {
        let result = self.send(hb_req(&client.id, client.epoch, Some(client.owned.clone())));
        assert_eq!(
            result.error_code(),
            0,
            "{}: {:?}",
            client.id,
            result.error_message()
        );
        client.epoch = result.member_epoch;
        if let Some(assignment) = &result.assignment {
            client.owned = assignment.clone();
        }
        result
    }

    /// Polls every client until the group is stable; asserts no partition ever has two
    /// owners among them.
    fn settle(&mut self, clients: &mut [Client]) {
        for _ in 0..20 {
            for i in 0..clients.len() {
                self.poll(&mut clients[i]);
                assert_exclusive(clients);
            }
            if self.group.state() == ConsumerState::Stable {
                return;
            }
        }
        panic!(
            "group did not settle: {:?}",
            self.group.describe(&self.topics)
        );
    }

    fn check_invariants(&self) {
        let g = &self.group;
        // Synchronous assignment: never left behind.
        assert_eq!(g.group_epoch, g.assignment_epoch);
        // The holder index matches the members, and nothing is held twice.
        let mut holders = BTreeMap::new();
        for m in g.members.values() {
            for key in partitions(&m.assigned).chain(partitions(&m.pending_revocation)) {
                assert!(
                    holders.insert(key, m.member_id.clone()).is_none(),
                    "{key:?} held twice"
                );
            }
            assert!(g.session_deadlines.contains_key(&m.member_id));
            assert_eq!(
                g.revocation_deadlines.contains_key(&m.member_id),
                m.state == MemberState::UnrevokedPartitions
            );
            assert!(m.epoch <= g.assignment_epoch);
        }
        assert_eq!(holders, g.holders);
        assert!(
            g.session_deadlines
                .keys()
                .all(|id| g.members.contains_key(id))
        );
    }
}

fn assert_exclusive(clients: &[Client]) {
    let mut seen = BTreeMap::new();
    for c in clients {
        for key in partitions(&c.owned) {
            if let Some(other) = seen.insert(key, &c.id) {
                panic!("{key:?} owned by {other} and {}", c.id);
            }
        }
    }
}

fn static_join(member_id: &str, instance: &str, names: &[&str]) -> HeartbeatRequest {
    HeartbeatRequest {
        instance_id: Some(instance.to_string()),
        ..join_req(member_id, names)
    }
}
