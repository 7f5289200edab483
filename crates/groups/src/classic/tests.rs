//! Unit tests of the classic group state machine, with the helpers they share; the tests
//! themselves are in `tests/`, by concern.

use bytes::{BufMut, BytesMut};
use sluice_protocol::kafka_protocol::protocol::{Encodable, StrBytes};

use sluice_protocol::kafka_protocol::ResponseError;

use super::*;
use crate::errors::{NONE, result_code};

mod join;
mod membership;
mod state;

const SESSION_MS: i32 = 10_000;
const REBALANCE_MS: i32 = 30_000;

fn code(e: ResponseError) -> i16 {
    e.code()
}

/// What a client sees of an outcome: its Kafka error code(s).
trait Coded {
    type Code;
    fn code(&self) -> Self::Code;
}

impl Coded for Result<(), GroupError> {
    type Code = i16;
    fn code(&self) -> i16 {
        result_code(self)
    }
}

impl Coded for Vec<Result<(), GroupError>> {
    type Code = Vec<i16>;
    fn code(&self) -> Vec<i16> {
        self.iter().map(result_code).collect()
    }
}

/// A refused SyncGroup as the client sees it: the code, and an otherwise empty answer.
fn sync_error(code: i16) -> (i16, SyncResult) {
    (code, SyncResult::default())
}

/// A refused JoinGroup as the client sees it.
fn join_error(member_id: &str, code: i16) -> (i16, JoinResult) {
    (
        code,
        JoinResult {
            generation_id: -1,
            member_id: member_id.to_owned(),
            ..JoinResult::default()
        },
    )
}

fn coded_sync(result: SyncResult) -> (i16, SyncResult) {
    let code = result.error_code();
    (
        code,
        SyncResult {
            error: None,
            ..result
        },
    )
}

fn coded_join(result: JoinResult) -> (i16, JoinResult) {
    let code = result.error_code();
    (
        code,
        JoinResult {
            error: None,
            ..result
        },
    )
}

/// A SyncGroup reply with its error as the code.
fn now_sync(reply: Reply<SyncResult>) -> Reply<(i16, SyncResult)> {
    match reply {
        Reply::Now(result) => Reply::Now(coded_sync(result)),
        Reply::Later { member_id } => Reply::Later { member_id },
    }
}

fn config(initial_rebalance_delay_ms: i64, members_max: usize) -> ClassicConfig {
    ClassicConfig {
        initial_rebalance_delay_ms,
        session_timeout_min_ms: 1_000,
        session_timeout_max_ms: 60_000,
        members_max,
    }
}

fn group(initial_rebalance_delay_ms: i64, members_max: usize) -> ClassicGroup {
    ClassicGroup::new("g".into(), config(initial_rebalance_delay_ms, members_max))
}

fn join_req(member_id: &str, client_id: &str) -> JoinRequest {
    JoinRequest {
        member_id: member_id.into(),
        group_instance_id: None,
        client_id: client_id.into(),
        client_host: "/10.0.0.1".into(),
        protocol_type: "consumer".into(),
        protocols: vec![("range".into(), Bytes::from_static(b"meta"))],
        session_timeout_ms: SESSION_MS,
        rebalance_timeout_ms: REBALANCE_MS,
        require_known_member_id: false,
        reason: None,
    }
}

fn static_req(instance: &str) -> JoinRequest {
    JoinRequest {
        group_instance_id: Some(instance.into()),
        ..join_req("", instance)
    }
}

fn with_protocols(mut req: JoinRequest, names: &[&str]) -> JoinRequest {
    req.protocols = names
        .iter()
        .map(|n| (n.to_string(), Bytes::from(format!("{n}-meta"))))
        .collect();
    req
}

fn sync_req(member_id: &str, generation_id: i32, assignments: Vec<(String, Bytes)>) -> SyncRequest {
    SyncRequest {
        member_id: member_id.into(),
        group_instance_id: None,
        generation_id,
        protocol_type: None,
        protocol_name: None,
        assignments,
    }
}

fn assignment_for(member_id: &str) -> Bytes {
    Bytes::from(format!("assigned to {member_id}"))
}

fn answered(reply: Reply<JoinResult>) -> JoinResult {
    match reply {
        Reply::Now(result) => result,
        Reply::Later { member_id } => panic!("the join of {member_id} was parked"),
    }
}

fn parked(reply: Reply<JoinResult>) -> String {
    match reply {
        Reply::Later { member_id } => member_id,
        Reply::Now(result) => panic!("join answered at once: {result:?}"),
    }
}

fn joins(effects: &[Effect]) -> Vec<(String, JoinResult)> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::Join { member_id, result } => Some((member_id.clone(), result.clone())),
            _ => None,
        })
        .collect()
}

/// [`joins`] with their errors as codes.
fn join_codes(effects: &[Effect]) -> Vec<(String, (i16, JoinResult))> {
    joins(effects)
        .into_iter()
        .map(|(id, result)| (id, coded_join(result)))
        .collect()
}

/// [`syncs`] with their errors as codes.
fn sync_codes(effects: &[Effect]) -> Vec<(String, (i16, SyncResult))> {
    syncs(effects)
        .into_iter()
        .map(|(id, result)| (id, coded_sync(result)))
        .collect()
}

fn syncs(effects: &[Effect]) -> Vec<(String, SyncResult)> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::Sync { member_id, result } => Some((member_id.clone(), result.clone())),
            _ => None,
        })
        .collect()
}

fn sync_ok(assignment: Bytes) -> SyncResult {
    SyncResult {
        error: None,
        protocol_type: Some("consumer".into()),
        protocol_name: Some("range".into()),
        assignment,
    }
}

/// A consumer subscription as a Java client sends it: version prefix, then the body.
fn subscription(version: i16, topics: &[&str]) -> Bytes {
    let body = ConsumerProtocolSubscription::default().with_topics(
        topics
            .iter()
            .map(|t| StrBytes::from_string(t.to_string()))
            .collect(),
    );
    let mut buf = BytesMut::new();
    buf.put_i16(version);
    body.encode(&mut buf, version.min(3))
        .expect("subscription encodes");
    buf.freeze()
}

/// When [`form`] and [`gathered`] groups end their join phase: all members join at 0, in
/// the first 100 ms step of the initial delay, so a second step (to 200) follows.
const FORMED_AT: i64 = 200;

/// All `reqs` join at 0 and the join phase ends at [`FORMED_AT`]; returns the member ids
/// in join order (the first leads).
fn gathered(members_max: usize, reqs: Vec<JoinRequest>) -> (ClassicGroup, Vec<String>) {
    let mut g = group(100, members_max);
    let mut fx = Vec::new();
    let ids: Vec<String> = reqs
        .into_iter()
        .map(|r| parked(g.join(0, r, &mut fx)))
        .collect();
    g.tick(100, &mut fx);
    if ids.len() > 1 {
        assert!(
            fx.is_empty(),
            "later members extend the initial delay: {fx:?}"
        );
    }
    g.tick(FORMED_AT, &mut fx);
    assert_eq!(joins(&fx).len(), ids.len());
    assert_eq!(g.state(), ClassicState::CompletingRebalance);
    (g, ids)
}

/// [`gathered`], then followers sync and the leader assigns `assignment_for(id)` to
/// everyone, all at [`FORMED_AT`]: a `Stable` group of generation 1.
fn form(members_max: usize, reqs: Vec<JoinRequest>) -> (ClassicGroup, Vec<String>) {
    let (mut g, ids) = gathered(members_max, reqs);
    let mut fx = Vec::new();
    for id in &ids[1..] {
        let reply = g.sync(FORMED_AT, sync_req(id, 1, vec![]), &mut fx);
        assert_eq!(
            reply,
            Reply::Later {
                member_id: id.clone()
            }
        );
    }
    let assignments = ids
        .iter()
        .map(|id| (id.clone(), assignment_for(id)))
        .collect();
    let reply = g.sync(FORMED_AT, sync_req(&ids[0], 1, assignments), &mut fx);
    assert_eq!(reply, Reply::Now(sync_ok(assignment_for(&ids[0]))));
    assert_eq!(g.state(), ClassicState::Stable);
    (g, ids)
}

fn stable_group(n: usize) -> (ClassicGroup, Vec<String>) {
    form(10, (0..n).map(|k| join_req("", &format!("c{k}"))).collect())
}

fn parked_sync(g: &mut ClassicGroup, member_id: &str) {
    let mut fx = Vec::new();
    let reply = g.sync(
        FORMED_AT,
        sync_req(member_id, g.generation_id(), vec![]),
        &mut fx,
    );
    assert_eq!(
        reply,
        Reply::Later {
            member_id: member_id.to_string()
        }
    );
}
