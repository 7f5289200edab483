//! # Server-side partition assignors for KIP-848 consumer groups
//!
//! The consumer group (`groups::consumer`) calls [`assign`] whenever its group epoch moves past
//! its assignment epoch: members' subscriptions + topic metadata + each member's current *target*
//! assignment in, the new target assignment out. Pure and deterministic: the result depends only
//! on the set of members (not on the order of the slice) and on the topics.
//!
//! Two assignors, by the names clients send in `group.remote.assignor`:
//!
//! - **`uniform`** (the default): balances the *number of partitions* per member across all
//!   subscribed topics. Three passes:
//!   1. *keep*: every member keeps the partitions of its current target that are still valid
//!      (topic exists, partition in range, member still subscribed, nobody earlier kept it);
//!   2. *fill*: unowned partitions go, topic by topic (topics with the fewest subscribers first,
//!      they have the fewest choices), to the least-loaded subscriber;
//!   3. *balance*: while some member can shed a partition to a member at least two lighter,
//!      it does: directly (the lighter member subscribes to a topic it holds) or along the
//!      shortest chain of members, each taking a partition from its predecessor and handing one
//!      of another topic on (their loads do not change). Each step lowers the sum of squared
//!      loads, so this ends; at the end no chain can lower it further, so members with the
//!      same subscriptions differ by at most one partition. Only the partitions needed to
//!      restore balance move (stickiness); direct moves are preferred over chains.
//!
//!   A partition only ever goes to a member subscribed to its topic, so with heterogeneous
//!   subscriptions loads may differ by more than one when the subscriptions force it (a
//!   member alone on a big topic takes all of it).
//!
//! - **`range`**: per topic, the members subscribed to it sorted by member id share the
//!   partitions: `partitions / members` each, and the first `partitions % members` members one
//!   more. With no history this gives Kafka's classic contiguous ranges (member 0 gets
//!   `0..q+1`, ...). It is sticky like Kafka's server-side range assignor: a member keeps its
//!   current partitions of the topic up to its quota (lowest first), members that held more
//!   than the base quota get the extra slots first, and only the remaining partitions are
//!   dealt out in ascending order. Because each topic is computed from the same inputs (its
//!   partition count, its sorted subscribers, their current partitions of it), topics with the
//!   same partition count and subscribers keep identical layouts (co-partitioning survives
//!   rebalances); after churn a member's range may no longer be contiguous.
//!
//! Racks are carried in [`MemberSpec`] but neither assignor uses them yet.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use uuid::Uuid;

/// A topic as the assignor sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicInfo {
    pub name: String,
    pub id: Uuid,
    pub partitions: i32,
}

/// Partitions per topic id.
pub type Assignment = BTreeMap<Uuid, BTreeSet<i32>>;

/// One member's input to the assignor.
#[derive(Debug, Clone)]
pub struct MemberSpec {
    pub member_id: String,
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    /// Topic ids the member subscribes to (names and regex already resolved).
    pub subscribed: BTreeSet<Uuid>,
    /// The member's current target assignment (for stickiness).
    pub current: Assignment,
}

/// The assignors the broker offers, by the names clients send in `group.remote.assignor`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum AssignorKind {
    Uniform,
    Range,
}

impl AssignorKind {
    /// Every assignor, in the order the broker lists them (`uniform` first: the default).
    pub const ALL: [AssignorKind; 2] = [AssignorKind::Uniform, AssignorKind::Range];

    /// `"uniform"` or `"range"`; `None` for any other name.
    pub fn from_name(name: &str) -> Option<AssignorKind> {
        AssignorKind::ALL
            .into_iter()
            .find(|kind| kind.name() == name)
    }

    pub fn name(self) -> &'static str {
        match self {
            AssignorKind::Uniform => "uniform",
            AssignorKind::Range => "range",
        }
    }
}

/// Computes the target assignment: every subscribed partition goes to exactly one member
/// subscribed to its topic; deterministic for the same input.
///
/// Every member appears in the result, with an empty assignment if it gets nothing. Topics
/// missing from `topics` (or with no partitions) are not assigned. If two specs share a member
/// id, the first one wins.
pub fn assign(
    kind: AssignorKind,
    members: &[MemberSpec],
    topics: &BTreeMap<Uuid, TopicInfo>,
) -> BTreeMap<String, Assignment> {
    let input = Input::new(members, topics);
    let owners = match kind {
        AssignorKind::Uniform => assign_uniform(&input),
        AssignorKind::Range => assign_range(&input),
    };
    input.result(&owners)
}

/// Owner (index into [`Input::members`]) of every partition, per topic.
type Owners = BTreeMap<Uuid, Vec<Option<usize>>>;

/// A subscribed topic: its partition count and its subscribers, ascending member indices.
#[derive(Debug)]
struct Subscribed {
    partitions: usize,
    subscribers: Vec<usize>,
}

/// The assignors' normalised input: members sorted by id (so the slice order never matters)
/// and, per assignable topic, who subscribes to it.
#[derive(Debug)]
struct Input<'a> {
    members: Vec<&'a MemberSpec>,
    topics: BTreeMap<Uuid, Subscribed>,
}

impl<'a> Input<'a> {
    fn new(specs: &'a [MemberSpec], topics: &BTreeMap<Uuid, TopicInfo>) -> Input<'a> {
        let mut members: Vec<&MemberSpec> = specs.iter().collect();
        // Stable sort + dedup keeps the first spec of a duplicated member id.
        members.sort_by(|a, b| a.member_id.cmp(&b.member_id));
        members.dedup_by(|later, earlier| later.member_id == earlier.member_id);
        let mut subscribed: BTreeMap<Uuid, Subscribed> = BTreeMap::new();
        for (index, member) in members.iter().enumerate() {
            for topic_id in &member.subscribed {
                let Some(topic) = topics.get(topic_id) else {
                    continue;
                };
                if topic.partitions <= 0 {
                    continue;
                }
                subscribed
                    .entry(*topic_id)
                    .or_insert_with(|| Subscribed {
                        partitions: topic.partitions as usize,
                        subscribers: Vec::new(),
                    })
                    .subscribers
                    .push(index);
            }
        }
        Input {
            members,
            topics: subscribed,
        }
    }

    fn no_owners(&self) -> Owners {
        self.topics
            .iter()
            .map(|(id, topic)| (*id, vec![None; topic.partitions]))
            .collect()
    }

    /// The partitions of `member`'s current assignment it may keep: topic assignable,
    /// member subscribed to it, partition in range. Ascending per topic.
    fn keepable(&self, member: usize) -> impl Iterator<Item = (Uuid, usize)> + '_ {
        self.members[member]
            .current
            .iter()
            .filter_map(move |(topic_id, partitions)| {
                let topic = self.topics.get(topic_id)?;
                topic.subscribers.binary_search(&member).ok()?;
                Some(
                    partitions
                        .iter()
                        .filter(|p| **p >= 0 && (**p as usize) < topic.partitions)
                        .map(move |p| (*topic_id, *p as usize)),
                )
            })
            .flatten()
    }

    fn result(&self, owners: &Owners) -> BTreeMap<String, Assignment> {
        let mut result: BTreeMap<String, Assignment> = self
            .members
            .iter()
            .map(|m| (m.member_id.clone(), Assignment::new()))
            .collect();
        for (topic_id, partitions) in owners {
            for (partition, owner) in partitions.iter().enumerate() {
                // Every assignable partition has an owner once an assignor is done.
                debug_assert!(owner.is_some(), "{topic_id}/{partition} left unassigned");
                if let Some(owner) = owner {
                    let member = &self.members[*owner].member_id;
                    if let Some(assignment) = result.get_mut(member) {
                        assignment
                            .entry(*topic_id)
                            .or_default()
                            .insert(partition as i32);
                    }
                }
            }
        }
        result
    }
}

/// Members' loads, indexed both globally and per topic, so the most/least loaded member
/// (overall or among a topic's subscribers) is a set lookup. Entries are `(load, member)`.
#[derive(Debug)]
struct Loads {
    load: Vec<usize>,
    by_load: BTreeSet<(usize, usize)>,
    by_topic: BTreeMap<Uuid, BTreeSet<(usize, usize)>>,
    /// The assignable topics each member subscribes to.
    member_topics: Vec<Vec<Uuid>>,
}

impl Loads {
    fn new(input: &Input, load: Vec<usize>) -> Loads {
        let mut member_topics = vec![Vec::new(); input.members.len()];
        let mut by_topic = BTreeMap::new();
        for (topic_id, topic) in &input.topics {
            let set: BTreeSet<(usize, usize)> =
                topic.subscribers.iter().map(|m| (load[*m], *m)).collect();
            by_topic.insert(*topic_id, set);
            for member in &topic.subscribers {
                member_topics[*member].push(*topic_id);
            }
        }
        let by_load = load.iter().enumerate().map(|(m, l)| (*l, m)).collect();
        Loads {
            load,
            by_load,
            by_topic,
            member_topics,
        }
    }

    fn set(&mut self, member: usize, load: usize) {
        let old = (self.load[member], member);
        let new = (load, member);
        self.by_load.remove(&old);
        self.by_load.insert(new);
        for topic_id in &self.member_topics[member] {
            if let Some(set) = self.by_topic.get_mut(topic_id) {
                set.remove(&old);
                set.insert(new);
            }
        }
        self.load[member] = load;
    }

    /// The least-loaded subscriber of `topic_id` (lowest index on ties).
    fn least_loaded(&self, topic_id: &Uuid) -> Option<(usize, usize)> {
        self.by_topic.get(topic_id)?.first().copied()
    }
}

/// The `uniform` assignor: keep, fill, balance (see the module docs).
fn assign_uniform(input: &Input) -> Owners {
    let mut owners = input.no_owners();
    // What each member holds, per topic: the balance pass picks partitions to move from here.
    let mut held: Vec<BTreeMap<Uuid, BTreeSet<usize>>> = vec![BTreeMap::new(); input.members.len()];

    // 1. Keep: members in id order, so a partition claimed twice stays with the first.
    for (member, mine) in held.iter_mut().enumerate() {
        for (topic_id, partition) in input.keepable(member) {
            let slot = &mut owners.get_mut(&topic_id).expect("keepable topic")[partition];
            if slot.is_none() {
                *slot = Some(member);
                mine.entry(topic_id).or_default().insert(partition);
            }
        }
    }
    let load = held
        .iter()
        .map(|topics| topics.values().map(BTreeSet::len).sum())
        .collect();
    let mut loads = Loads::new(input, load);

    // 2. Fill: the most constrained topics (fewest subscribers) first.
    let mut fill_order: Vec<(usize, Uuid)> = input
        .topics
        .iter()
        .map(|(id, topic)| (topic.subscribers.len(), *id))
        .collect();
    fill_order.sort();
    for (_, topic_id) in fill_order {
        let slots = owners.get_mut(&topic_id).expect("subscribed topic");
        for (partition, slot) in slots.iter_mut().enumerate() {
            if slot.is_some() {
                continue;
            }
            let (load, member) = loads
                .least_loaded(&topic_id)
                .expect("a subscribed topic has subscribers");
            *slot = Some(member);
            held[member].entry(topic_id).or_default().insert(partition);
            loads.set(member, load + 1);
        }
    }

    // 3. Balance.
    while let Some(path) = next_path(input, &loads, &held) {
        let (donor, _, _) = path[0];
        let (_, receiver, _) = path[path.len() - 1];
        for (from, to, topic_id) in path {
            let partitions = held[from]
                .get_mut(&topic_id)
                .expect("path follows held topics");
            let partition = partitions.pop_last().expect("a held topic has partitions");
            if partitions.is_empty() {
                held[from].remove(&topic_id);
            }
            held[to].entry(topic_id).or_default().insert(partition);
            owners.get_mut(&topic_id).expect("subscribed topic")[partition] = Some(to);
        }
        // Members in the middle of the path gave one partition and took one.
        loads.set(donor, loads.load[donor] - 1);
        loads.set(receiver, loads.load[receiver] + 1);
    }
    owners
}

/// One balancing step: partition moves `(from, to, topic)`, each handing one partition of
/// `topic` along, from the most loaded member that can shed one to a member at least two
/// lighter. `None` when no member can.
fn next_path(
    input: &Input,
    loads: &Loads,
    held: &[BTreeMap<Uuid, BTreeSet<usize>>],
) -> Option<Vec<(usize, usize, Uuid)>> {
    let (min_load, _) = *loads.by_load.first()?;
    for &(load, donor) in loads.by_load.iter().rev() {
        if load < min_load + 2 {
            // Nobody from here down is two heavier than anyone.
            return None;
        }
        if let Some(path) = shedding_path(input, loads, held, donor) {
            return Some(path);
        }
    }
    None
}

/// A shortest chain from `donor` to a member at least two lighter, where each member on it
/// is subscribed to a topic its predecessor holds (so a partition of that topic can move one
/// step). A direct move is a chain of one; longer chains let heterogeneous subscriptions
/// balance through a member whose own load does not change. Among the nearest candidates
/// the lightest (then lowest index) wins. Breadth-first over members, expanding each topic
/// once: O(subscriptions) per call.
fn shedding_path(
    input: &Input,
    loads: &Loads,
    held: &[BTreeMap<Uuid, BTreeSet<usize>>],
    donor: usize,
) -> Option<Vec<(usize, usize, Uuid)>> {
    let donor_load = loads.load[donor];
    let mut depth = vec![usize::MAX; input.members.len()];
    let mut parent: Vec<Option<(usize, Uuid)>> = vec![None; input.members.len()];
    let mut expanded: BTreeSet<Uuid> = BTreeSet::new();
    let mut queue = VecDeque::from([donor]);
    depth[donor] = 0;
    // (depth, load, member) of the best receiver so far.
    let mut best: Option<(usize, usize, usize)> = None;
    while let Some(node) = queue.pop_front() {
        if best.is_some_and(|(d, _, _)| depth[node] >= d) {
            // Everything this node reaches is farther than the receiver already found.
            break;
        }
        for topic_id in held[node].keys() {
            if !expanded.insert(*topic_id) {
                continue;
            }
            for &next in &input.topics[topic_id].subscribers {
                if depth[next] != usize::MAX {
                    continue;
                }
                depth[next] = depth[node] + 1;
                parent[next] = Some((node, *topic_id));
                let load = loads.load[next];
                if load + 2 <= donor_load {
                    let candidate = (depth[next], load, next);
                    best = Some(best.map_or(candidate, |b| b.min(candidate)));
                }
                queue.push_back(next);
            }
        }
    }
    let (_, _, receiver) = best?;
    let mut path = Vec::new();
    let mut node = receiver;
    while let Some((from, topic_id)) = parent[node] {
        path.push((from, node, topic_id));
        node = from;
    }
    path.reverse();
    Some(path)
}

/// The `range` assignor: per topic, sticky ranges (see the module docs).
fn assign_range(input: &Input) -> Owners {
    let mut owners = input.no_owners();
    // Each member's keepable partitions, per topic, ascending (claims).
    let mut claims: BTreeMap<Uuid, BTreeMap<usize, Vec<usize>>> = BTreeMap::new();
    for member in 0..input.members.len() {
        for (topic_id, partition) in input.keepable(member) {
            claims
                .entry(topic_id)
                .or_default()
                .entry(member)
                .or_default()
                .push(partition);
        }
    }
    for (topic_id, topic) in &input.topics {
        let slots = owners.get_mut(topic_id).expect("subscribed topic");
        let subscribers = &topic.subscribers;
        let base = topic.partitions / subscribers.len();
        let mut extra = topic.partitions % subscribers.len();
        let no_claims = BTreeMap::new();
        let topic_claims = claims.get(topic_id).unwrap_or(&no_claims);
        // A partition claimed by two members stays with the first (members in id order).
        let mut kept: Vec<Vec<usize>> = subscribers
            .iter()
            .map(|member| {
                let mine = topic_claims.get(member).map(Vec::as_slice).unwrap_or(&[]);
                mine.iter()
                    .copied()
                    .filter(|p| {
                        let free = slots[*p].is_none();
                        if free {
                            slots[*p] = Some(*member);
                        }
                        free
                    })
                    .collect()
            })
            .collect();
        for slot in slots.iter_mut() {
            *slot = None;
        }
        // Quotas: members that already hold more than the base get the extra slots first,
        // then the first members in id order.
        let mut quota = vec![base; subscribers.len()];
        for (i, mine) in kept.iter().enumerate() {
            if extra > 0 && mine.len() > base {
                quota[i] += 1;
                extra -= 1;
            }
        }
        for q in quota.iter_mut() {
            if extra > 0 && *q == base {
                *q += 1;
                extra -= 1;
            }
        }
        // Keep up to the quota, lowest partitions first.
        for (i, mine) in kept.iter_mut().enumerate() {
            mine.truncate(quota[i]);
            for p in mine.iter() {
                slots[*p] = Some(subscribers[i]);
            }
        }
        // Deal the rest in ascending order to members below their quota, in id order.
        let mut free = (0..topic.partitions)
            .filter(|p| slots[*p].is_none())
            .collect::<Vec<_>>()
            .into_iter();
        for (i, mine) in kept.iter().enumerate() {
            for _ in mine.len()..quota[i] {
                let p = free.next().expect("quotas add up to the partition count");
                slots[p] = Some(subscribers[i]);
            }
        }
        debug_assert!(free.next().is_none());
    }
    owners
}

#[cfg(test)]
mod tests {
    use super::*;

    fn topic(n: u128, name: &str, partitions: i32) -> TopicInfo {
        TopicInfo {
            name: name.to_string(),
            id: Uuid::from_u128(n),
            partitions,
        }
    }

    fn topics<'a>(list: impl IntoIterator<Item = &'a TopicInfo>) -> BTreeMap<Uuid, TopicInfo> {
        list.into_iter().map(|t| (t.id, t.clone())).collect()
    }

    fn spec(id: &str, subscribed: &[&TopicInfo]) -> MemberSpec {
        MemberSpec {
            member_id: id.to_string(),
            instance_id: None,
            rack_id: None,
            subscribed: subscribed.iter().map(|t| t.id).collect(),
            current: Assignment::new(),
        }
    }

    fn with_current(
        mut members: Vec<MemberSpec>,
        result: &BTreeMap<String, Assignment>,
    ) -> Vec<MemberSpec> {
        for m in &mut members {
            m.current = result.get(&m.member_id).cloned().unwrap_or_default();
        }
        members
    }

    fn count(a: &Assignment) -> usize {
        a.values().map(BTreeSet::len).sum()
    }

    /// Every partition of every subscribed topic is assigned exactly once, to a subscriber.
    fn assert_coverage(
        members: &[MemberSpec],
        topics: &BTreeMap<Uuid, TopicInfo>,
        result: &BTreeMap<String, Assignment>,
    ) {
        let mut seen: BTreeMap<(Uuid, i32), &str> = BTreeMap::new();
        for (member_id, assignment) in result {
            let spec = members
                .iter()
                .find(|m| &m.member_id == member_id)
                .expect("known member");
            for (topic_id, partitions) in assignment {
                assert!(
                    spec.subscribed.contains(topic_id),
                    "{member_id} got unsubscribed {topic_id}"
                );
                assert!(!partitions.is_empty(), "empty partition set in result");
                for p in partitions {
                    assert!(*p >= 0 && *p < topics[topic_id].partitions);
                    assert!(
                        seen.insert((*topic_id, *p), member_id).is_none(),
                        "{topic_id}/{p} assigned twice"
                    );
                }
            }
        }
        for topic in topics.values() {
            if members.iter().any(|m| m.subscribed.contains(&topic.id)) {
                for p in 0..topic.partitions {
                    assert!(
                        seen.contains_key(&(topic.id, p)),
                        "{}/{p} unassigned",
                        topic.name
                    );
                }
            }
        }
        for m in members {
            assert!(
                result.contains_key(&m.member_id),
                "{} missing from the result",
                m.member_id
            );
        }
    }

    fn moved(before: &BTreeMap<String, Assignment>, after: &BTreeMap<String, Assignment>) -> usize {
        after
            .iter()
            .map(|(member, assignment)| {
                let old = before.get(member).cloned().unwrap_or_default();
                assignment
                    .iter()
                    .map(|(t, ps)| {
                        ps.iter()
                            .filter(|p| !old.get(t).is_some_and(|o| o.contains(p)))
                            .count()
                    })
                    .sum::<usize>()
            })
            .sum()
    }

    fn spread(result: &BTreeMap<String, Assignment>) -> (usize, usize) {
        let counts: Vec<usize> = result.values().map(count).collect();
        (*counts.iter().min().unwrap(), *counts.iter().max().unwrap())
    }

    #[test]
    fn names_round_trip() {
        for kind in AssignorKind::ALL {
            assert_eq!(AssignorKind::from_name(kind.name()), Some(kind));
        }
        assert_eq!(
            AssignorKind::from_name("uniform"),
            Some(AssignorKind::Uniform)
        );
        assert_eq!(AssignorKind::from_name("range"), Some(AssignorKind::Range));
        assert_eq!(AssignorKind::from_name("sticky"), None);
        assert_eq!(AssignorKind::from_name("Uniform"), None);
    }

    #[test]
    fn uniform_balances_and_covers_homogeneous_groups() {
        let a = topic(1, "a", 7);
        let b = topic(2, "b", 5);
        let c = topic(3, "c", 1);
        let all = topics([&a, &b, &c]);
        for n in 1..=15 {
            let members: Vec<MemberSpec> = (0..n)
                .map(|i| spec(&format!("m{i:02}"), &[&a, &b, &c]))
                .collect();
            let result = assign(AssignorKind::Uniform, &members, &all);
            assert_coverage(&members, &all, &result);
            let (min, max) = spread(&result);
            assert!(max - min <= 1, "{n} members: loads {min}..{max}");
        }
    }

    #[test]
    fn uniform_is_sticky_when_a_member_joins() {
        let a = topic(1, "a", 12);
        let all = topics([&a]);
        let members: Vec<MemberSpec> = ["m1", "m2", "m3"]
            .iter()
            .map(|id| spec(id, &[&a]))
            .collect();
        let first = assign(AssignorKind::Uniform, &members, &all);
        let mut members = with_current(members, &first);
        members.push(spec("m4", &[&a]));
        let second = assign(AssignorKind::Uniform, &members, &all);
        assert_coverage(&members, &all, &second);
        assert_eq!(spread(&second), (3, 3));
        // Only the three partitions the newcomer needs move.
        assert_eq!(moved(&first, &second), 3);
        for id in ["m1", "m2", "m3"] {
            let before = &first[id][&a.id];
            let after = &second[id][&a.id];
            assert!(
                after.is_subset(before),
                "{id} gained partitions it did not have"
            );
        }
    }

    #[test]
    fn uniform_is_sticky_when_a_member_leaves() {
        let a = topic(1, "a", 10);
        let b = topic(2, "b", 3);
        let all = topics([&a, &b]);
        let members: Vec<MemberSpec> = ["m1", "m2", "m3", "m4"]
            .iter()
            .map(|id| spec(id, &[&a, &b]))
            .collect();
        let first = assign(AssignorKind::Uniform, &members, &all);
        let mut members = with_current(members, &first);
        let gone = members.remove(1);
        let second = assign(AssignorKind::Uniform, &members, &all);
        assert_coverage(&members, &all, &second);
        let (min, max) = spread(&second);
        assert!(max - min <= 1);
        // Exactly the departed member's partitions move; everyone keeps what it had.
        assert_eq!(moved(&first, &second), count(&first[&gone.member_id]));
        for m in &members {
            for (t, ps) in &first[&m.member_id] {
                assert!(ps.is_subset(&second[&m.member_id][t]));
            }
        }
    }

    #[test]
    fn uniform_rebalances_a_member_that_kept_everything() {
        let a = topic(1, "a", 9);
        let all = topics([&a]);
        let mut members = vec![spec("m1", &[&a]), spec("m2", &[&a]), spec("m3", &[&a])];
        members[0].current = BTreeMap::from([(a.id, (0..9).collect())]);
        let result = assign(AssignorKind::Uniform, &members, &all);
        assert_coverage(&members, &all, &result);
        assert_eq!(spread(&result), (3, 3));
        assert!(result["m1"][&a.id].is_subset(&(0..9).collect()));
    }

    #[test]
    fn uniform_respects_heterogeneous_subscriptions() {
        let a = topic(1, "a", 6);
        let b = topic(2, "b", 9);
        let c = topic(3, "c", 5);
        let all = topics([&a, &b, &c]);
        let members = vec![
            spec("m1", &[&a]),
            spec("m2", &[&a, &b]),
            spec("m3", &[&b, &c]),
            spec("m4", &[&c]),
        ];
        let result = assign(AssignorKind::Uniform, &members, &all);
        assert_coverage(&members, &all, &result);
        // 20 partitions, 4 members: 5 each is reachable, but only by moving a partition of
        // `b` from m3 to m2 and one of `a` from m2 to m1 (a chain through m2).
        for (id, assignment) in &result {
            assert_eq!(count(assignment), 5, "{id}: {assignment:?}");
        }

        // When subscriptions force imbalance: m4 can hold at most the 5 of `c`.
        let big_b = topic(2, "b", 12);
        let all = topics([&a, &big_b, &c]);
        let members = vec![
            spec("m1", &[&a]),
            spec("m2", &[&a, &big_b]),
            spec("m3", &[&big_b, &c]),
            spec("m4", &[&c]),
        ];
        let result = assign(AssignorKind::Uniform, &members, &all);
        assert_coverage(&members, &all, &result);
        assert_eq!(count(&result["m4"]), 5);
        let others: Vec<usize> = ["m1", "m2", "m3"]
            .iter()
            .map(|id| count(&result[*id]))
            .collect();
        assert_eq!(others.iter().sum::<usize>(), 18);
        assert!(others.iter().all(|c| *c == 6), "{others:?}");

        // A member alone on a topic takes all of it, however unbalanced that is.
        let members = vec![spec("m1", &[&a]), spec("m2", &[&a, &big_b])];
        let result = assign(AssignorKind::Uniform, &members, &all);
        assert_coverage(&members, &all, &result);
        assert_eq!(result["m2"][&big_b.id].len(), 12);
        assert_eq!(count(&result["m1"]), 6);
        assert!(!result["m2"].contains_key(&a.id));
    }

    #[test]
    fn uniform_ignores_stale_current_assignments() {
        let a = topic(1, "a", 4);
        let b = topic(2, "b", 2);
        let gone = Uuid::from_u128(99);
        let all = topics([&a, &b]);
        let mut members = vec![spec("m1", &[&a]), spec("m2", &[&a, &b])];
        // m1: a partition out of range, a deleted topic, an unsubscribed topic, and a
        // partition m2 also claims (m1 sorts first and keeps it).
        members[0].current = BTreeMap::from([
            (a.id, BTreeSet::from([0, 9, -1])),
            (gone, BTreeSet::from([0])),
            (b.id, BTreeSet::from([1])),
        ]);
        members[1].current = BTreeMap::from([(a.id, BTreeSet::from([0, 1]))]);
        let result = assign(AssignorKind::Uniform, &members, &all);
        assert_coverage(&members, &all, &result);
        assert!(result["m1"][&a.id].contains(&0));
        assert!(result["m2"][&a.id].contains(&1));
        assert!(!result["m1"].contains_key(&gone));
        assert!(!result["m1"].contains_key(&b.id));
    }

    #[test]
    fn assignors_are_deterministic_and_order_independent() {
        let a = topic(1, "a", 11);
        let b = topic(2, "b", 4);
        let all = topics([&a, &b]);
        let members = vec![
            spec("z", &[&a, &b]),
            spec("b", &[&a]),
            spec("k", &[&a, &b]),
            spec("a", &[&b]),
        ];
        for kind in AssignorKind::ALL {
            let first = assign(kind, &members, &all);
            let mut reversed = members.clone();
            reversed.reverse();
            assert_eq!(first, assign(kind, &reversed, &all), "{}", kind.name());
            assert_eq!(first, assign(kind, &members, &all), "{}", kind.name());
            // Feeding the result back changes nothing.
            let again = assign(kind, &with_current(members.clone(), &first), &all);
            assert_eq!(first, again, "{}", kind.name());
        }
    }

    #[test]
    fn no_members_or_no_topics() {
        let a = topic(1, "a", 3);
        let all = topics([&a]);
        for kind in AssignorKind::ALL {
            assert!(assign(kind, &[], &all).is_empty());
            let members = vec![spec("m1", &[]), spec("m2", &[&a])];
            let result = assign(kind, &members, &BTreeMap::new());
            assert_eq!(result.len(), 2);
            assert!(result.values().all(BTreeMap::is_empty));
            // A topic with no partitions is not an error.
            let empty = topics([&topic(1, "a", 0)]);
            let result = assign(kind, &members, &empty);
            assert!(result.values().all(BTreeMap::is_empty));
        }
    }

    #[test]
    fn range_gives_contiguous_ranges_first_members_one_more() {
        let a = topic(1, "a", 8);
        let all = topics([&a]);
        let members = vec![spec("c", &[&a]), spec("a", &[&a]), spec("b", &[&a])];
        let result = assign(AssignorKind::Range, &members, &all);
        assert_coverage(&members, &all, &result);
        assert_eq!(result["a"][&a.id], BTreeSet::from([0, 1, 2]));
        assert_eq!(result["b"][&a.id], BTreeSet::from([3, 4, 5]));
        assert_eq!(result["c"][&a.id], BTreeSet::from([6, 7]));
    }

    #[test]
    fn range_keeps_co_partitioned_topics_aligned() {
        let a = topic(1, "a", 6);
        let b = topic(2, "b", 6);
        let all = topics([&a, &b]);
        let mut members = vec![spec("m1", &[&a, &b]), spec("m2", &[&a, &b])];
        let mut previous = assign(AssignorKind::Range, &members, &all);
        for joiner in ["m0", "m3", "m9"] {
            members = with_current(members, &previous);
            members.push(spec(joiner, &[&a, &b]));
            let result = assign(AssignorKind::Range, &members, &all);
            assert_coverage(&members, &all, &result);
            for (id, assignment) in &result {
                assert_eq!(
                    assignment.get(&a.id),
                    assignment.get(&b.id),
                    "{id} misaligned"
                );
            }
            previous = result;
        }
    }

    #[test]
    fn range_is_sticky_up_to_the_quota() {
        let a = topic(1, "a", 6);
        let all = topics([&a]);
        let members = vec![spec("m1", &[&a]), spec("m2", &[&a])];
        let first = assign(AssignorKind::Range, &members, &all);
        assert_eq!(first["m1"][&a.id], BTreeSet::from([0, 1, 2]));
        let mut members = with_current(members, &first);
        members.push(spec("m3", &[&a]));
        let second = assign(AssignorKind::Range, &members, &all);
        assert_coverage(&members, &all, &second);
        // Everyone ends with two; the old members keep their two lowest.
        assert_eq!(second["m1"][&a.id], BTreeSet::from([0, 1]));
        assert_eq!(second["m2"][&a.id], BTreeSet::from([3, 4]));
        assert_eq!(second["m3"][&a.id], BTreeSet::from([2, 5]));
        assert_eq!(moved(&first, &second), 2);

        // m2 leaves: m1 and m3 keep theirs and split the rest, 3 each.
        let members: Vec<MemberSpec> = with_current(members, &second)
            .into_iter()
            .filter(|m| m.member_id != "m2")
            .collect();
        let third = assign(AssignorKind::Range, &members, &all);
        assert_coverage(&members, &all, &third);
        assert!(second["m1"][&a.id].is_subset(&third["m1"][&a.id]));
        assert!(second["m3"][&a.id].is_subset(&third["m3"][&a.id]));
        assert_eq!(count(&third["m1"]), 3);
        assert_eq!(count(&third["m3"]), 3);
    }

    #[test]
    fn range_extra_slot_goes_to_a_member_that_already_had_it() {
        let a = topic(1, "a", 5);
        let all = topics([&a]);
        let mut members = vec![spec("m1", &[&a]), spec("m2", &[&a])];
        members[0].current = BTreeMap::from([(a.id, BTreeSet::from([3, 4]))]);
        members[1].current = BTreeMap::from([(a.id, BTreeSet::from([0, 1, 2]))]);
        let result = assign(AssignorKind::Range, &members, &all);
        assert_eq!(result["m1"][&a.id], BTreeSet::from([3, 4]));
        assert_eq!(result["m2"][&a.id], BTreeSet::from([0, 1, 2]));
    }

    #[test]
    fn range_only_uses_subscribers_of_each_topic() {
        let a = topic(1, "a", 4);
        let b = topic(2, "b", 3);
        let all = topics([&a, &b]);
        let members = vec![spec("m1", &[&a]), spec("m2", &[&a, &b]), spec("m3", &[&b])];
        let result = assign(AssignorKind::Range, &members, &all);
        assert_coverage(&members, &all, &result);
        assert_eq!(result["m1"][&a.id], BTreeSet::from([0, 1]));
        assert_eq!(result["m2"][&a.id], BTreeSet::from([2, 3]));
        assert_eq!(result["m2"][&b.id], BTreeSet::from([0, 1]));
        assert_eq!(result["m3"][&b.id], BTreeSet::from([2]));
    }

    mod properties {
        use proptest::prelude::*;

        use super::*;

        /// Partition counts per topic; per member, which topics it subscribes to and the
        /// `(topic, partition)` pairs of its current assignment (some out of range).
        type Scenario = (Vec<i32>, Vec<Vec<bool>>, Vec<Vec<(usize, i32)>>);

        fn scenario() -> impl Strategy<Value = Scenario> {
            (1usize..5, 1usize..9).prop_flat_map(|(topic_count, member_count)| {
                (
                    proptest::collection::vec(0i32..12, topic_count),
                    proptest::collection::vec(
                        proptest::collection::vec(any::<bool>(), topic_count),
                        member_count,
                    ),
                    proptest::collection::vec(
                        proptest::collection::vec((0..topic_count, -1i32..13), 0..8),
                        member_count,
                    ),
                )
            })
        }

        proptest! {
            #[test]
            fn every_assignor_covers_and_uniform_balances(
                (partitions, subscriptions, current) in scenario()
            ) {
                let list: Vec<TopicInfo> = partitions
                    .iter()
                    .enumerate()
                    .map(|(i, n)| topic(i as u128 + 1, &format!("t{i}"), *n))
                    .collect();
                let all = topics(&list);
                let members: Vec<MemberSpec> = subscriptions
                    .iter()
                    .zip(&current)
                    .enumerate()
                    .map(|(i, (subscribed, current))| {
                        let mut m = spec(&format!("m{i}"), &[]);
                        m.subscribed = list.iter().zip(subscribed).filter(|(_, s)| **s).map(|(t, _)| t.id).collect();
                        for (t, p) in current {
                            m.current.entry(list[*t].id).or_default().insert(*p);
                        }
                        m
                    })
                    .collect();
                for kind in AssignorKind::ALL {
                    let result = assign(kind, &members, &all);
                    assert_coverage(&members, &all, &result);
                }
                // Members with identical subscriptions end within one partition of each other.
                let result = assign(AssignorKind::Uniform, &members, &all);
                for x in &members {
                    for y in &members {
                        if x.subscribed == y.subscribed && !x.subscribed.is_empty() {
                            let (cx, cy) = (count(&result[&x.member_id]), count(&result[&y.member_id]));
                            prop_assert!(cx.abs_diff(cy) <= 1, "{} {cx} vs {} {cy}", x.member_id, y.member_id);
                        }
                    }
                }
            }
        }
    }
}
