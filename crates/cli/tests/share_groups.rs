//! Black-box tests of `sluice group list|describe|reset-offsets|delete` on share groups
//! (KIP-932): the real binary as broker (`sluice serve` on a free 127.0.0.1 port) and as
//! client. The share group's members are played by the test itself, speaking the Kafka
//! protocol directly ([`ShareMember`]): ShareGroupHeartbeat to join, stay and leave, ShareFetch
//! to acquire records and acknowledge them.

mod common;

use std::time::{Duration, Instant};

use common::{Server, kafka_call, kafka_call_on, kafka_connect, run_cli};
use serde_json::{Value, json};
use sluice_protocol::kafka_protocol::messages::incremental_alter_configs_request::{
    AlterConfigsResource, AlterableConfig,
};
use sluice_protocol::kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use sluice_protocol::kafka_protocol::messages::share_fetch_request::{
    AcknowledgementBatch, FetchPartition, FetchTopic,
};
use sluice_protocol::kafka_protocol::messages::{
    AlterShareGroupOffsetsRequest, ApiKey, GroupId, IncrementalAlterConfigsRequest,
    MetadataRequest, RequestKind, ResponseKind, ShareFetchRequest, ShareFetchResponse,
    ShareGroupHeartbeatRequest, ShareGroupHeartbeatResponse, TopicName,
    alter_share_group_offsets_request,
};
use sluice_protocol::kafka_protocol::protocol::StrBytes;

/// GROUP, Kafka's config resource type of a group's configs.
const RESOURCE_GROUP: i8 = 32;
/// ShareFetch acknowledge type "accept".
const ACCEPT: i8 = 1;
/// The topic the share group reads, with [`RECORDS`] records in its one partition.
const TOPIC: &str = "jobs";
const RECORDS: i64 = 10;
/// How long one test may take at most, setup included.
const TEST_BUDGET: Duration = Duration::from_secs(60);

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_owned())
}

/// One member of a share group, as a share consumer would be one.
struct ShareMember {
    port: u16,
    group: String,
    member_id: String,
    epoch: i32,
    /// The share session's next epoch (0 opens one).
    session_epoch: i32,
    /// The connection its share session lives on (it ends when the connection closes).
    conn: std::net::TcpStream,
}

impl ShareMember {
    /// Joins `group` (epoch 0 with the subscription), then heartbeats once more so the member
    /// has the group's current assignment.
    fn join(server: &Server, group: &str) -> ShareMember {
        let mut m = ShareMember {
            port: server.port,
            group: group.to_owned(),
            member_id: format!("{:032x}", rand::random::<u128>()),
            epoch: 0,
            session_epoch: 0,
            conn: kafka_connect(server.port),
        };
        m.heartbeat();
        m.heartbeat();
        m
    }

    fn heartbeat_request(&self, epoch: i32) -> ShareGroupHeartbeatResponse {
        let mut request = ShareGroupHeartbeatRequest::default()
            .with_group_id(GroupId(s(&self.group)))
            .with_member_id(s(&self.member_id))
            .with_member_epoch(epoch);
        if epoch == 0 {
            request = request.with_subscribed_topic_names(Some(vec![TopicName(s(TOPIC))]));
        }
        match kafka_call(
            self.port,
            ApiKey::ShareGroupHeartbeat,
            1,
            RequestKind::ShareGroupHeartbeat(request),
        ) {
            ResponseKind::ShareGroupHeartbeat(r) => r,
            other => panic!("{other:?}"),
        }
    }

    /// A heartbeat at the member's epoch: keeps it in the group.
    fn heartbeat(&mut self) {
        let r = self.heartbeat_request(self.epoch);
        assert_eq!(r.error_code, 0, "{r:?}");
        self.epoch = r.member_epoch;
    }

    /// Leaves the group (epoch -1).
    fn leave(self) {
        let r = self.heartbeat_request(-1);
        assert_eq!(r.error_code, 0, "{r:?}");
        assert_eq!(r.member_epoch, -1, "{r:?}");
    }

    /// A ShareFetch of partition 0 of `topic` (a topic id, no partitions yet) that first
    /// acknowledges `accept` (an inclusive offset range) and acquires up to `max_records`.
    fn fetch(
        &mut self,
        topic: &FetchTopic,
        accept: Option<(i64, i64)>,
        max_records: i32,
    ) -> ShareFetchResponse {
        let acks = accept
            .into_iter()
            .map(|(first, last)| {
                AcknowledgementBatch::default()
                    .with_first_offset(first)
                    .with_last_offset(last)
                    .with_acknowledge_types(vec![ACCEPT])
            })
            .collect();
        let request = ShareFetchRequest::default()
            .with_group_id(Some(GroupId(s(&self.group))))
            .with_member_id(Some(s(&self.member_id)))
            .with_share_session_epoch(self.session_epoch)
            .with_max_wait_ms(0)
            .with_min_bytes(1)
            .with_max_bytes(1 << 20)
            .with_max_records(max_records)
            .with_batch_size(max_records)
            .with_topics(vec![topic.clone().with_partitions(vec![
                FetchPartition::default()
                    .with_partition_index(0)
                    .with_acknowledgement_batches(acks),
            ])]);
        let r = match kafka_call_on(
            &mut self.conn,
            ApiKey::ShareFetch,
            1,
            RequestKind::ShareFetch(request),
        ) {
            ResponseKind::ShareFetch(r) => r,
            other => panic!("{other:?}"),
        };
        assert_eq!(r.error_code, 0, "{r:?}");
        for p in r.responses.iter().flat_map(|t| &t.partitions) {
            assert_eq!((p.error_code, p.acknowledge_error_code), (0, 0), "{r:?}");
        }
        self.session_epoch += 1;
        r
    }
}

/// The offsets a ShareFetch acquired.
fn acquired(r: &ShareFetchResponse) -> Vec<i64> {
    r.responses
        .iter()
        .flat_map(|t| &t.partitions)
        .flat_map(|p| &p.acquired_records)
        .flat_map(|a| a.first_offset..=a.last_offset)
        .collect()
}

/// Topic [`TOPIC`] (one partition, [`RECORDS`] records) and group `group` set to start at the
/// earliest offset; returns the topic as a ShareFetch names it (by id).
fn setup(server: &Server, group: &str) -> FetchTopic {
    server.ok(&["topic", "create", TOPIC, "--partitions", "1"], "");
    let records: String = (0..RECORDS).map(|i| format!("job-{i}\n")).collect();
    server.ok(&["produce", TOPIC], &records);
    let request = IncrementalAlterConfigsRequest::default().with_resources(vec![
        AlterConfigsResource::default()
            .with_resource_type(RESOURCE_GROUP)
            .with_resource_name(s(group))
            .with_configs(vec![
                AlterableConfig::default()
                    .with_name(s("share.auto.offset.reset"))
                    .with_config_operation(0)
                    .with_value(Some(s("earliest"))),
            ]),
    ]);
    match kafka_call(
        server.port,
        ApiKey::IncrementalAlterConfigs,
        1,
        RequestKind::IncrementalAlterConfigs(request),
    ) {
        ResponseKind::IncrementalAlterConfigs(r) => {
            assert_eq!(r.responses[0].error_code, 0, "{r:?}")
        }
        other => panic!("{other:?}"),
    }
    let request = MetadataRequest::default().with_topics(Some(vec![
        MetadataRequestTopic::default().with_name(Some(TopicName(s(TOPIC)))),
    ]));
    match kafka_call(
        server.port,
        ApiKey::Metadata,
        12,
        RequestKind::Metadata(request),
    ) {
        ResponseKind::Metadata(r) => FetchTopic::default().with_topic_id(r.topics[0].topic_id),
        other => panic!("{other:?}"),
    }
}

/// Two members reading the one partition; the first acquires every record and accepts
/// 0..=3, so the group's start offset is 4 (records 4..=9 stay acquired by it).
fn busy_group(server: &Server, group: &str) -> (ShareMember, ShareMember) {
    let topic = setup(server, group);
    let mut a = ShareMember::join(server, group);
    let mut b = ShareMember::join(server, group);
    // a's first heartbeat came before b joined: one more, so both have the newest epoch.
    a.heartbeat();
    let got = acquired(&a.fetch(&topic, None, 100));
    assert_eq!(got, (0..RECORDS).collect::<Vec<_>>());
    let got = acquired(&a.fetch(&topic, Some((0, 3)), 100));
    assert!(got.is_empty(), "{got:?}");
    b.heartbeat();
    (a, b)
}

fn describe(server: &Server, group: &str) -> Value {
    let out = server
        .ok(&["group", "describe", group, "--json"], "")
        .stdout;
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"))
}

fn json_lines(stdout: &str) -> Vec<Value> {
    stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

/// Each offsets row as `(topic, partition, start offset, log end, lag, members)`.
fn offsets(d: &Value) -> Vec<(String, i64, Value, Value, Value, usize)> {
    d["offsets"]
        .as_array()
        .unwrap_or_else(|| panic!("no offsets: {d}"))
        .iter()
        .map(|r| {
            (
                r["topic"].as_str().unwrap().to_owned(),
                r["partition"].as_i64().unwrap(),
                r["start_offset"].clone(),
                r["log_end_offset"].clone(),
                r["lag"].clone(),
                r["member_ids"].as_array().unwrap().len(),
            )
        })
        .collect()
}

fn row(start: i64, members: usize) -> (String, i64, Value, Value, Value, usize) {
    (
        TOPIC.to_owned(),
        0,
        json!(start),
        json!(RECORDS),
        json!(RECORDS - start),
        members,
    )
}

fn within_budget(started: Instant) {
    assert!(
        started.elapsed() < TEST_BUDGET,
        "took {:?}",
        started.elapsed()
    );
}

#[test]
fn share_group_help_explains_start_offsets_and_lag() {
    let run = run_cli("127.0.0.1:1", &["group", "describe", "--help"], "");
    assert!(run.status.success());
    for needle in ["START-OFFSET", "already acknowledged", "\"type\":\"share\""] {
        assert!(run.stdout.contains(needle), "{needle}: {}", run.stdout);
    }
    let run = run_cli("127.0.0.1:1", &["group", "reset-offsets", "--help"], "");
    assert!(run.stdout.contains("share group"), "{}", run.stdout);
    let run = run_cli("127.0.0.1:1", &["group", "list", "--help"], "");
    assert!(run.stdout.contains("--type share"), "{}", run.stdout);
}

#[test]
fn share_groups_are_listed_and_described_with_start_offsets() {
    let started = Instant::now();
    let server = Server::start_fresh();
    let (mut a, mut b) = busy_group(&server, "workers");
    // A classic group beside it, made by an admin commit.
    server.ok(
        &[
            "group",
            "reset-offsets",
            "reports",
            "--topic",
            TOPIC,
            "--to-latest",
            "--execute",
        ],
        "",
    );

    let listed = json_lines(&server.ok(&["group", "list", "--json"], "").stdout);
    assert_eq!(
        listed,
        vec![
            json!({"group": "reports", "type": "classic", "state": "Empty", "protocol_type": ""}),
            json!({"group": "workers", "type": "share", "state": "Stable", "protocol_type": "share"}),
        ]
    );
    let run = server.ok(&["group", "list", "--type", "share"], "");
    let rows: Vec<Vec<&str>> = run
        .stdout
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        rows,
        vec![
            vec!["GROUP", "TYPE", "STATE", "PROTOCOL-TYPE"],
            vec!["workers", "share", "Stable", "share"],
        ]
    );
    let run = server.ok(
        &["group", "list", "--type", "consumer,classic", "--json"],
        "",
    );
    assert_eq!(json_lines(&run.stdout).len(), 1, "{}", run.stdout);

    a.heartbeat();
    b.heartbeat();
    let d = describe(&server, "workers");
    assert_eq!(d["type"], "share", "{d}");
    assert_eq!(d["state"], "Stable", "{d}");
    assert_eq!(d["protocol_type"], "share", "{d}");
    assert_eq!(d["assignor"], "simple", "{d}");
    assert!(d["group_epoch"].as_i64().unwrap() >= 2, "{d}");
    let mut members: Vec<(String, Value)> = d["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["member_id"].as_str().unwrap().to_owned(),
                m["assignment"].clone(),
            )
        })
        .collect();
    members.sort_by(|x, y| x.0.cmp(&y.0));
    let mut expected = vec![
        (
            a.member_id.clone(),
            json!([{"topic": TOPIC, "partitions": [0]}]),
        ),
        (
            b.member_id.clone(),
            json!([{"topic": TOPIC, "partitions": [0]}]),
        ),
    ];
    expected.sort_by(|x, y| x.0.cmp(&y.0));
    assert_eq!(members, expected, "{d}");
    assert_eq!(d["members"][0]["client_id"], "test", "{d}");
    // Both members read partition 0; 0..=3 are accepted, so the start offset is 4.
    assert_eq!(offsets(&d), vec![row(4, 2)], "{d}");
    assert_eq!(d["total_lag"], RECORDS - 4, "{d}");
    // 4..=9 are still in flight, all of them locked by a.
    assert_eq!(
        (&d["offsets"][0]["in_flight"], &d["offsets"][0]["acquired"]),
        (&json!(6), &json!(6)),
        "{d}"
    );

    let text = server.ok(&["group", "describe", "workers"], "").stdout;
    for line in [
        "type: share",
        "state: Stable",
        "protocol: share, assignor simple",
        "members: 2",
    ] {
        assert!(text.lines().any(|l| l == line), "{line}: {text}");
    }
    assert!(text.contains("group epoch: "), "{text}");
    let offset_rows: Vec<Vec<&str>> = text
        .lines()
        .skip_while(|l| *l != "offsets:")
        .skip(1)
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        offset_rows,
        vec![
            vec![
                "TOPIC",
                "PARTITION",
                "START-OFFSET",
                "LOG-END",
                "LAG",
                "IN-FLIGHT",
                "LOCKED",
                "MEMBERS"
            ],
            vec![TOPIC, "0", "4", "10", "6", "6", "6", "2"],
            vec!["total", "lag:", "6"],
        ],
        "{text}"
    );
    // The classic group is still described as one.
    assert_eq!(describe(&server, "reports")["type"], "classic");
    a.leave();
    b.leave();
    within_budget(started);
}

#[test]
fn share_group_offsets_reset_only_when_empty_and_the_empty_group_deletes() {
    let started = Instant::now();
    let server = Server::start_fresh();
    let (a, b) = busy_group(&server, "workers");
    let reset = |extra: &[&str]| {
        let mut args = vec!["group", "reset-offsets", "workers", "--topic", TOPIC];
        args.extend_from_slice(extra);
        server.run(&args, "")
    };

    // With members: --execute is refused, a dry run shows the plan with a note.
    let run = reset(&["--to-earliest", "--execute"]);
    assert!(!run.status.success(), "{}", run.stdout);
    assert!(
        run.stderr.contains(
            "cannot reset the start offsets now: share group 'workers' is active \
             (state Stable, 2 members)"
        ),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.contains("stop its share consumers"),
        "{}",
        run.stderr
    );
    let run = reset(&["--to-earliest", "--json"]);
    assert!(run.status.success(), "{}", run.stderr);
    assert_eq!(
        json_lines(&run.stdout),
        vec![json!({"topic": TOPIC, "partition": 0, "current_offset": 4, "new_offset": 0})]
    );
    assert!(run.stderr.contains("will be refused"), "{}", run.stderr);
    // The broker refuses too, should the CLI's check be passed by.
    let request = AlterShareGroupOffsetsRequest::default()
        .with_group_id(GroupId(s("workers")))
        .with_topics(vec![
            alter_share_group_offsets_request::AlterShareGroupOffsetsRequestTopic::default()
                .with_topic_name(TopicName(s(TOPIC)))
                .with_partitions(vec![
                    alter_share_group_offsets_request::AlterShareGroupOffsetsRequestPartition::default()
                        .with_partition_index(0)
                        .with_start_offset(0),
                ]),
        ]);
    match kafka_call(
        server.port,
        ApiKey::AlterShareGroupOffsets,
        0,
        RequestKind::AlterShareGroupOffsets(request),
    ) {
        ResponseKind::AlterShareGroupOffsets(r) => {
            let codes: Vec<i16> = std::iter::once(r.error_code)
                .chain(
                    r.responses
                        .iter()
                        .flat_map(|t| &t.partitions)
                        .map(|p| p.error_code),
                )
                .collect();
            assert!(codes.contains(&68), "NON_EMPTY_GROUP expected: {r:?}");
        }
        other => panic!("{other:?}"),
    }
    // Nor does delete take a group with members.
    let run = server.fails(&["group", "delete", "workers"], "");
    assert!(run.stderr.contains("NON_EMPTY_GROUP"), "{}", run.stderr);

    // Once both have left, the group is Empty and keeps its start offset.
    a.leave();
    b.leave();
    let d = describe(&server, "workers");
    assert_eq!(
        (&d["state"], &d["members"]),
        (&json!("Empty"), &json!([])),
        "{d}"
    );
    assert_eq!(offsets(&d), vec![row(4, 0)], "{d}");

    let run = reset(&["--to-earliest", "--execute"]);
    assert!(run.status.success(), "{}", run.stderr);
    let plan: Vec<Vec<&str>> = run
        .stdout
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        plan,
        vec![
            vec!["TOPIC", "PARTITION", "CURRENT", "NEW"],
            vec![TOPIC, "0", "4", "0"],
        ]
    );
    assert!(
        run.stderr
            .contains("set new start offsets of share group 'workers' for 1 partition"),
        "{}",
        run.stderr
    );
    let d = describe(&server, "workers");
    assert_eq!(d["type"], "share", "{d}");
    assert_eq!(offsets(&d), vec![row(0, 0)], "{d}");
    assert_eq!(d["total_lag"], RECORDS, "{d}");

    // The other targets work the same way on start offsets.
    let run = server.ok(
        &[
            "group",
            "reset-offsets",
            "workers",
            "--all-topics",
            "--shift-by",
            "7",
            "--execute",
        ],
        "",
    );
    let last: Vec<&str> = run
        .stdout
        .lines()
        .last()
        .unwrap()
        .split_whitespace()
        .collect();
    assert_eq!(last, vec![TOPIC, "0", "0", "7"], "{}", run.stdout);
    assert_eq!(offsets(&describe(&server, "workers")), vec![row(7, 0)]);

    // The empty share group deletes, and is gone.
    let run = server.ok(&["group", "delete", "workers"], "");
    assert_eq!(run.stdout, "deleted group workers\n");
    let listed = json_lines(&server.ok(&["group", "list", "--json"], "").stdout);
    assert!(listed.is_empty(), "{listed:?}");
    let run = server.fails(&["group", "describe", "workers"], "");
    assert!(run.stderr.contains("GROUP_ID_NOT_FOUND"), "{}", run.stderr);
    within_budget(started);
}
