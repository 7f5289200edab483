//! The guard against the codec (`kafka-protocol`, with `share_v2` for the versions it adds), for
//! every supported (api, version): frames built from the layout table decode with the codec and
//! re-encode to the same bytes (so the table is the codec's layout), the codec's own encodings
//! pass the guard, and no rewrite or mutation makes the guard refuse a frame the codec decodes.

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Decodable, Encodable};
use proptest::prelude::*;

use super::layout::{Elem, Struct, Ty};
use super::sample::{self, Rng};
use super::*;
use crate::versions::{self, SUPPORTED};

/// Declared lengths up to this may be handed to `kafka-protocol` even when the guard refuses
/// them: reserving this many elements costs a few megabytes at most.
const SAFE_FOR_CODEC: u64 = 1 << 16;

fn supported_pairs() -> Vec<(ApiKey, i16)> {
    SUPPORTED
        .iter()
        .flat_map(|&(api, min, max)| (min..=max).map(move |v| (api, v)))
        .collect()
}

/// The codec alone on `frame` (`kafka-protocol`, with `share_v2` for the versions it adds; no
/// guard): the header, the body, and the bytes it left unread.
fn codec_decode(frame: &[u8]) -> Result<(RequestHeader, RequestKind, usize), String> {
    let api = ApiKey::try_from(i16::from_be_bytes([frame[0], frame[1]])).map_err(|_| "api")?;
    let version = i16::from_be_bytes([frame[2], frame[3]]);
    let mut buf = Bytes::copy_from_slice(frame);
    let header = RequestHeader::decode(&mut buf, api.request_header_version(version))
        .map_err(|e| format!("header: {e}"))?;
    let body = crate::codec::decode_request_body(api, &mut buf, version)
        .map_err(|e| format!("body: {e}"))?;
    Ok((header, body, buf.len()))
}

/// The api and version a (possibly mutated) frame declares, if supported.
fn declared(frame: &[u8]) -> Option<(ApiKey, i16)> {
    let api = ApiKey::try_from(i16::from_be_bytes([*frame.first()?, *frame.get(1)?])).ok()?;
    let version = i16::from_be_bytes([*frame.get(2)?, *frame.get(3)?]);
    (frame.len() >= 8 && versions::is_supported(api, version)).then_some((api, version))
}

/// Whether `kafka-protocol` may be run on a frame the guard refused without risking a huge
/// allocation: no array it would meet before failing declares a large count.
fn safe_for_codec(frame: &[u8], api: ApiKey, version: i16) -> bool {
    largest_count_reserved(frame, api, version) <= SAFE_FOR_CODEC
}

/// The differential check on one frame: if the guard refuses it, `kafka-protocol` must fail on
/// it too (checked whenever that is safe to run). Returns the guard's verdict.
fn guard_refusal_implies_codec_failure(frame: &[u8]) -> Option<Result<(), Rejection>> {
    let (api, version) = declared(frame)?;
    let verdict = check(frame, api, version);
    match &verdict {
        Ok(()) => {
            // Safe: every length was checked. Whatever the codec says is fine.
            let _ = codec_decode(frame);
        }
        Err(rejection) if safe_for_codec(frame, api, version) => {
            if let Ok((_, body, _)) = codec_decode(frame) {
                panic!(
                    "guard refused a frame kafka-protocol decodes ({api:?} v{version}): \
                     {rejection}\nframe: {frame:02x?}\nbody: {body:?}"
                );
            }
        }
        Err(_) => {}
    }
    Some(verdict)
}

fn default_body(api: ApiKey) -> RequestKind {
    match api {
        ApiKey::Produce => RequestKind::Produce(Default::default()),
        ApiKey::Fetch => RequestKind::Fetch(Default::default()),
        ApiKey::ListOffsets => RequestKind::ListOffsets(Default::default()),
        ApiKey::Metadata => RequestKind::Metadata(Default::default()),
        ApiKey::ApiVersions => RequestKind::ApiVersions(Default::default()),
        ApiKey::CreateTopics => RequestKind::CreateTopics(Default::default()),
        ApiKey::DeleteTopics => RequestKind::DeleteTopics(Default::default()),
        ApiKey::DeleteRecords => RequestKind::DeleteRecords(Default::default()),
        ApiKey::DescribeLogDirs => RequestKind::DescribeLogDirs(Default::default()),
        ApiKey::DescribeTopicPartitions => RequestKind::DescribeTopicPartitions(Default::default()),
        ApiKey::DescribeConfigs => RequestKind::DescribeConfigs(Default::default()),
        ApiKey::AlterConfigs => RequestKind::AlterConfigs(Default::default()),
        ApiKey::CreatePartitions => RequestKind::CreatePartitions(Default::default()),
        ApiKey::IncrementalAlterConfigs => RequestKind::IncrementalAlterConfigs(Default::default()),
        ApiKey::DescribeCluster => RequestKind::DescribeCluster(Default::default()),
        ApiKey::InitProducerId => RequestKind::InitProducerId(Default::default()),
        ApiKey::FindCoordinator => RequestKind::FindCoordinator(Default::default()),
        ApiKey::JoinGroup => RequestKind::JoinGroup(Default::default()),
        ApiKey::SyncGroup => RequestKind::SyncGroup(Default::default()),
        ApiKey::Heartbeat => RequestKind::Heartbeat(Default::default()),
        ApiKey::LeaveGroup => RequestKind::LeaveGroup(Default::default()),
        ApiKey::OffsetCommit => RequestKind::OffsetCommit(Default::default()),
        ApiKey::OffsetFetch => RequestKind::OffsetFetch(Default::default()),
        ApiKey::OffsetDelete => RequestKind::OffsetDelete(Default::default()),
        ApiKey::ListGroups => RequestKind::ListGroups(Default::default()),
        ApiKey::DescribeGroups => RequestKind::DescribeGroups(Default::default()),
        ApiKey::DeleteGroups => RequestKind::DeleteGroups(Default::default()),
        ApiKey::ConsumerGroupHeartbeat => RequestKind::ConsumerGroupHeartbeat(Default::default()),
        ApiKey::ConsumerGroupDescribe => RequestKind::ConsumerGroupDescribe(Default::default()),
        ApiKey::SaslHandshake => RequestKind::SaslHandshake(Default::default()),
        ApiKey::SaslAuthenticate => RequestKind::SaslAuthenticate(Default::default()),
        ApiKey::DescribeUserScramCredentials => {
            RequestKind::DescribeUserScramCredentials(Default::default())
        }
        ApiKey::AlterUserScramCredentials => {
            RequestKind::AlterUserScramCredentials(Default::default())
        }
        ApiKey::CreateAcls => RequestKind::CreateAcls(Default::default()),
        ApiKey::DescribeAcls => RequestKind::DescribeAcls(Default::default()),
        ApiKey::DeleteAcls => RequestKind::DeleteAcls(Default::default()),
        ApiKey::DescribeClientQuotas => RequestKind::DescribeClientQuotas(Default::default()),
        ApiKey::AlterClientQuotas => RequestKind::AlterClientQuotas(Default::default()),
        ApiKey::ShareGroupHeartbeat => RequestKind::ShareGroupHeartbeat(Default::default()),
        ApiKey::ShareGroupDescribe => RequestKind::ShareGroupDescribe(Default::default()),
        ApiKey::ShareFetch => RequestKind::ShareFetch(Default::default()),
        ApiKey::ShareAcknowledge => RequestKind::ShareAcknowledge(Default::default()),
        ApiKey::DescribeShareGroupOffsets => {
            RequestKind::DescribeShareGroupOffsets(Default::default())
        }
        ApiKey::AlterShareGroupOffsets => RequestKind::AlterShareGroupOffsets(Default::default()),
        ApiKey::DeleteShareGroupOffsets => RequestKind::DeleteShareGroupOffsets(Default::default()),
        other => panic!("no default body for {other:?}: add it with the API to SUPPORTED"),
    }
}

/// `header` and `body` as the codec encodes them (no size prefix).
fn codec_encode(api: ApiKey, version: i16, header: &RequestHeader, body: &RequestKind) -> Vec<u8> {
    let mut buf = BytesMut::new();
    header
        .encode(&mut buf, api.request_header_version(version))
        .expect("encode header");
    crate::codec::encode_request_body(&mut buf, body, version).expect("encode body");
    buf.to_vec()
}

/// A populated frame, as `kafka-protocol` encodes it: a frame built from the table, decoded and
/// encoded again by the codec crate.
pub(super) fn populated(api: ApiKey, version: i16, seed: u64) -> Vec<u8> {
    let frame = sample::request(api, version, seed as i32, &mut Rng(seed)).expect("layout");
    let (header, body, _) = codec_decode(&frame).expect("sample decodes");
    codec_encode(api, version, &header, &body)
}

#[test]
fn every_supported_api_has_a_layout() {
    for &(api, _, _) in SUPPORTED {
        assert!(
            layout(api).is_some(),
            "{api:?}: no layout (regenerate layouts.rs)"
        );
    }
}

/// An array whose elements could take zero bytes would let a frame declare any count.
#[test]
fn every_array_element_takes_at_least_one_byte() {
    fn visit(s: &'static Struct, version: i16, flexible: bool, path: &str) {
        for field in s.fields.iter().filter(|f| f.versions.contains(version)) {
            let compact = flexible && !field.classic;
            let path = format!("{path}.{}", field.name);
            if let Ty::Array(elem) = field.ty {
                let min = min_size(elem, version, compact);
                assert!(min >= 1, "{path} v{version}: elements may take {min} bytes");
            }
            if let Ty::One(Elem::Struct(inner)) | Ty::Array(Elem::Struct(inner)) = field.ty {
                visit(inner, version, flexible, &path);
            }
        }
    }
    for (api, version) in supported_pairs() {
        let message = layout(api).unwrap();
        let flexible = message.flexible.contains(version);
        visit(message.body, version, flexible, &format!("{api:?}"));
    }
}

/// The table is the codec's layout: a frame built from it decodes with `kafka-protocol`,
/// consuming every byte, and `kafka-protocol` writes it back byte for byte.
#[test]
fn frames_built_from_the_table_round_trip_through_the_codec() {
    let mut populated_arrays = 0;
    for (api, version) in supported_pairs() {
        for seed in 0..120u64 {
            let frame = sample::request(api, version, seed as i32, &mut Rng(seed)).unwrap();
            check(&frame, api, version)
                .unwrap_or_else(|e| panic!("{api:?} v{version} seed {seed}: guard: {e}"));
            let (header, body, left) = codec_decode(&frame)
                .unwrap_or_else(|e| panic!("{api:?} v{version} seed {seed}: codec: {e}"));
            assert_eq!(left, 0, "{api:?} v{version} seed {seed}: codec left bytes");
            let again = codec_encode(api, version, &header, &body);
            assert_eq!(
                again, frame,
                "{api:?} v{version} seed {seed}: re-encoded differently\n{body:?}"
            );
            let lengths = length_fields(&frame, api, version).unwrap();
            populated_arrays += lengths
                .iter()
                .filter(|l| l.kind == LengthKind::Array && l.raw > 1)
                .count();
        }
    }
    assert!(
        populated_arrays > 1000,
        "samples too thin: {populated_arrays}"
    );
}

#[test]
fn default_requests_encoded_by_the_codec_pass() {
    for (api, version) in supported_pairs() {
        let header = RequestHeader::default()
            .with_request_api_key(api as i16)
            .with_request_api_version(version)
            .with_correlation_id(7);
        let body = default_body(api);
        let mut buf = BytesMut::new();
        if header
            .encode(&mut buf, api.request_header_version(version))
            .map_err(|e| e.to_string())
            .and_then(|()| crate::codec::encode_request_body(&mut buf, &body, version))
            .is_err()
        {
            // Some defaults cannot be written in some versions (a null the version forbids).
            continue;
        }
        check(&buf, api, version).unwrap_or_else(|e| panic!("{api:?} v{version}: {e}"));
        codec_decode(&buf).unwrap_or_else(|e| panic!("{api:?} v{version}: {e}"));
    }
}

#[test]
fn the_reported_crash_is_refused_with_the_numbers() {
    let frame = b"\x00\x03\x00\x01\x00\x00\x00\x07\x00\x05probe\x7f\xff\xff\xff";
    let rejection = check(frame, ApiKey::Metadata, 1).unwrap_err();
    assert_eq!(
        rejection.to_string(),
        "topics: declares 2147483647 elements, 0 bytes left (each takes at least 2)"
    );
}

#[test]
fn paths_name_nested_fields_and_the_header() {
    let frame = populated_frame_with(ApiKey::Produce, 8, |l| {
        l.path.starts_with("topic_data[") && l.kind == LengthKind::Bytes
    });
    let (frame, field) = frame.expect("a Produce v9 sample with records");
    let bad = sample::rewrite(&frame, &field, 0x7fff_ffff);
    let rejection = check(&bad, ApiKey::Produce, 8).unwrap_err();
    assert!(
        rejection.path.starts_with("topic_data[") && rejection.path.ends_with("].records"),
        "{rejection}"
    );
    assert!(matches!(
        rejection.problem,
        Problem::TooLong {
            declared: 0x7fff_ffff,
            ..
        }
    ));

    let (frame, field) =
        populated_frame_with(ApiKey::Metadata, 4, |l| l.path == "header.client_id").unwrap();
    let bad = sample::rewrite(&frame, &field, -2);
    assert_eq!(
        check(&bad, ApiKey::Metadata, 4).unwrap_err().to_string(),
        "header.client_id: declares a negative length (-2)"
    );
}

/// The first populated frame of `api` at `version` with a length field matching `want`.
fn populated_frame_with(
    api: ApiKey,
    version: i16,
    want: impl Fn(&LengthField) -> bool,
) -> Option<(Vec<u8>, LengthField)> {
    (0..200).find_map(|seed| {
        let frame = populated(api, version, seed);
        let field = length_fields(&frame, api, version)
            .unwrap()
            .into_iter()
            .find(|l| want(l))?;
        Some((frame, field))
    })
}

/// Every length of every supported request, set to values around the truth: whatever the
/// guard refuses, `kafka-protocol` fails on too.
#[test]
fn rewritten_lengths_never_make_the_guard_refuse_what_the_codec_decodes() {
    let (mut refused, mut accepted) = (0usize, 0usize);
    for (api, version) in supported_pairs() {
        for seed in 0..6 {
            let frame = populated(api, version, seed);
            for field in length_fields(&frame, api, version).unwrap() {
                let left_after = (frame.len() - field.offset - field.width) as i64;
                for value in [
                    -2,
                    -1,
                    0,
                    1,
                    2,
                    field.raw - 1,
                    field.raw + 1,
                    field.raw + 2,
                    left_after,
                    left_after + 1,
                    left_after + 2,
                ] {
                    let bad = sample::rewrite(&frame, &field, value);
                    match guard_refusal_implies_codec_failure(&bad) {
                        Some(Ok(())) => accepted += 1,
                        Some(Err(_)) => refused += 1,
                        None => {}
                    }
                }
            }
        }
    }
    assert!(
        refused > 1000 && accepted > 1000,
        "{refused} refused, {accepted} accepted"
    );
}

/// A mutation of a valid frame.
#[derive(Debug, Clone)]
enum Mutation {
    /// Overwrite the byte at (index mod len).
    Set(prop::sample::Index, u8),
    Insert(prop::sample::Index, u8),
    Remove(prop::sample::Index),
    /// Set the (index mod count)th length field to a value near the bytes that remain.
    Length(prop::sample::Index, i64),
    Truncate(prop::sample::Index),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<prop::sample::Index>(), any::<u8>()).prop_map(|(i, b)| Mutation::Set(i, b)),
        (any::<prop::sample::Index>(), any::<u8>()).prop_map(|(i, b)| Mutation::Insert(i, b)),
        any::<prop::sample::Index>().prop_map(Mutation::Remove),
        (any::<prop::sample::Index>(), -3i64..64).prop_map(|(i, d)| Mutation::Length(i, d)),
        any::<prop::sample::Index>().prop_map(Mutation::Truncate),
    ]
}

fn apply(frame: &mut Vec<u8>, api: ApiKey, version: i16, m: &Mutation) {
    // Leave the fixed header prefix alone (a changed api key or version is a different
    // request, checked by `declared`), except through `Set`.
    let body = 8..frame.len().max(9);
    let at = |i: &prop::sample::Index| body.start + i.index(body.len());
    match m {
        Mutation::Set(i, b) => {
            let i = i.index(frame.len());
            frame[i] = *b;
        }
        Mutation::Insert(i, b) => frame.insert(at(i).min(frame.len()), *b),
        Mutation::Remove(i) => {
            if frame.len() > 8 {
                frame.remove(at(i).min(frame.len() - 1));
            }
        }
        Mutation::Truncate(i) => frame.truncate(at(i)),
        Mutation::Length(i, delta) => {
            if let Ok(fields) = length_fields(frame, api, version)
                && !fields.is_empty()
            {
                let field = &fields[i.index(fields.len())];
                let left = (frame.len() - field.offset - field.width) as i64;
                *frame = sample::rewrite(frame, field, (left + delta).max(-2));
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    /// Random mutations of valid frames of every supported request: whenever `kafka-protocol`
    /// decodes the result, the guard accepts it.
    #[test]
    fn codec_success_implies_guard_acceptance(
        pair in any::<prop::sample::Index>(),
        seed in any::<u64>(),
        mutations in prop::collection::vec(mutation(), 1..5),
    ) {
        let pairs = supported_pairs();
        let (api, version) = pairs[pair.index(pairs.len())];
        let mut frame = populated(api, version, seed);
        for m in &mutations {
            apply(&mut frame, api, version, m);
        }
        guard_refusal_implies_codec_failure(&frame);
    }
}

/// The share-group APIs (KIP-932).
const SHARE_APIS: [ApiKey; 7] = [
    ApiKey::ShareGroupHeartbeat,
    ApiKey::ShareGroupDescribe,
    ApiKey::ShareFetch,
    ApiKey::ShareAcknowledge,
    ApiKey::DescribeShareGroupOffsets,
    ApiKey::AlterShareGroupOffsets,
    ApiKey::DeleteShareGroupOffsets,
];

/// A topic id with every byte `b` (`kafka-protocol` does not re-export its `Uuid` type, so the
/// value comes from decoding a struct that carries one).
fn topic_id(b: u8) -> share_fetch_request::ForgottenTopic {
    let mut wire = vec![b; 16];
    wire.extend_from_slice(&[1, 0]); // no partitions, no tagged fields
    Decodable::decode(&mut Bytes::from(wire), 1).expect("forgotten topic")
}

/// One request of every share-group API with every field set, built with `kafka-protocol`'s own
/// types (not from the layout table), nested arrays and an unknown tagged field included.
fn populated_share_bodies() -> Vec<(ApiKey, RequestKind)> {
    use alter_share_group_offsets_request::{
        AlterShareGroupOffsetsRequestPartition as AlterPartition,
        AlterShareGroupOffsetsRequestTopic as AlterTopic,
    };
    use delete_share_group_offsets_request::DeleteShareGroupOffsetsRequestTopic as DeleteTopic;
    use describe_share_group_offsets_request::{
        DescribeShareGroupOffsetsRequestGroup as DescribeGroup,
        DescribeShareGroupOffsetsRequestTopic as DescribeTopic,
    };
    use kafka_protocol::protocol::StrBytes;
    use share_acknowledge_request as ack;
    use share_fetch_request as fetch;
    let s = StrBytes::from_static_str;
    let group = |g: &'static str| GroupId(s(g));
    let topic = |t: &'static str| TopicName(s(t));
    let (id_a, id_b) = (topic_id(0xa5).topic_id, topic_id(0x3c).topic_id);
    let fetch_acks = vec![
        fetch::AcknowledgementBatch::default()
            .with_first_offset(0)
            .with_last_offset(9)
            .with_acknowledge_types(vec![1]),
        fetch::AcknowledgementBatch::default()
            .with_first_offset(10)
            .with_last_offset(12)
            .with_acknowledge_types(vec![1, 2, 3]),
    ];
    let ack_acks = vec![
        ack::AcknowledgementBatch::default()
            .with_first_offset(5)
            .with_last_offset(7)
            .with_acknowledge_types(vec![3, 0, 2]),
    ];
    vec![
        (
            ApiKey::ShareGroupHeartbeat,
            RequestKind::ShareGroupHeartbeat(
                ShareGroupHeartbeatRequest::default()
                    .with_group_id(group("share-group"))
                    .with_member_id(s("member-1"))
                    .with_member_epoch(3)
                    .with_rack_id(Some(s("rack-a")))
                    .with_subscribed_topic_names(Some(vec![topic("orders"), topic("audit")]))
                    .with_unknown_tagged_field(100, Bytes::from_static(b"tag")),
            ),
        ),
        (
            ApiKey::ShareGroupDescribe,
            RequestKind::ShareGroupDescribe(
                ShareGroupDescribeRequest::default()
                    .with_group_ids(vec![group("g1"), group("g2")])
                    .with_include_authorized_operations(true),
            ),
        ),
        (
            ApiKey::ShareFetch,
            RequestKind::ShareFetch(
                ShareFetchRequest::default()
                    .with_group_id(Some(group("share-group")))
                    .with_member_id(Some(s("member-1")))
                    .with_share_session_epoch(2)
                    .with_max_wait_ms(500)
                    .with_min_bytes(1)
                    .with_max_bytes(1 << 20)
                    .with_max_records(500)
                    .with_batch_size(100)
                    .with_topics(vec![
                        fetch::FetchTopic::default()
                            .with_topic_id(id_a)
                            .with_partitions(vec![
                                fetch::FetchPartition::default()
                                    .with_partition_index(0)
                                    .with_acknowledgement_batches(fetch_acks),
                                fetch::FetchPartition::default().with_partition_index(3),
                            ]),
                    ])
                    .with_forgotten_topics_data(vec![
                        fetch::ForgottenTopic::default()
                            .with_topic_id(id_b)
                            .with_partitions(vec![1, 2]),
                    ]),
            ),
        ),
        (
            ApiKey::ShareAcknowledge,
            RequestKind::ShareAcknowledge(
                ShareAcknowledgeRequest::default()
                    .with_group_id(Some(group("share-group")))
                    .with_member_id(Some(s("member-1")))
                    .with_share_session_epoch(4)
                    .with_topics(vec![
                        ack::AcknowledgeTopic::default()
                            .with_topic_id(id_a)
                            .with_partitions(vec![
                                ack::AcknowledgePartition::default()
                                    .with_partition_index(1)
                                    .with_acknowledgement_batches(ack_acks),
                            ]),
                    ]),
            ),
        ),
        (
            ApiKey::DescribeShareGroupOffsets,
            RequestKind::DescribeShareGroupOffsets(
                DescribeShareGroupOffsetsRequest::default().with_groups(vec![
                    DescribeGroup::default()
                        .with_group_id(group("g1"))
                        .with_topics(Some(vec![
                            DescribeTopic::default()
                                .with_topic_name(topic("orders"))
                                .with_partitions(vec![0, 1, 7]),
                        ])),
                    // Null topics: every topic-partition of the group.
                    DescribeGroup::default()
                        .with_group_id(group("g2"))
                        .with_topics(None),
                ]),
            ),
        ),
        (
            ApiKey::AlterShareGroupOffsets,
            RequestKind::AlterShareGroupOffsets(
                AlterShareGroupOffsetsRequest::default()
                    .with_group_id(group("share-group"))
                    .with_topics(vec![
                        AlterTopic::default()
                            .with_topic_name(topic("orders"))
                            .with_partitions(vec![
                                AlterPartition::default()
                                    .with_partition_index(0)
                                    .with_start_offset(42),
                                AlterPartition::default()
                                    .with_partition_index(1)
                                    .with_start_offset(0),
                            ]),
                    ]),
            ),
        ),
        (
            ApiKey::DeleteShareGroupOffsets,
            RequestKind::DeleteShareGroupOffsets(
                DeleteShareGroupOffsetsRequest::default()
                    .with_group_id(group("share-group"))
                    .with_topics(vec![
                        DeleteTopic::default().with_topic_name(topic("orders")),
                        DeleteTopic::default().with_topic_name(topic("audit")),
                    ]),
            ),
        ),
    ]
}

/// Every share-group request, default and populated, as `kafka-protocol` writes it in every
/// supported version: the guard accepts it and the codec reads it back whole; every strict
/// prefix of it is refused by the guard (and fails in the codec too).
#[test]
fn share_group_requests_encoded_by_the_codec_pass_and_truncations_are_refused() {
    let bodies: Vec<(ApiKey, RequestKind)> = SHARE_APIS
        .iter()
        .map(|&api| (api, default_body(api)))
        .chain(populated_share_bodies())
        .collect();
    let mut frames = 0;
    for (api, body) in bodies {
        let (min, max) = versions::supported(api).unwrap_or_else(|| panic!("{api:?} supported"));
        for version in min..=max {
            let header = RequestHeader::default()
                .with_request_api_key(api as i16)
                .with_request_api_version(version)
                .with_correlation_id(11)
                .with_client_id(Some(kafka_protocol::protocol::StrBytes::from_static_str(
                    "share-client",
                )));
            let frame = codec_encode(api, version, &header, &body);
            check(&frame, api, version).unwrap_or_else(|e| panic!("{api:?} v{version}: {e}"));
            let (_, decoded, left) =
                codec_decode(&frame).unwrap_or_else(|e| panic!("{api:?} v{version}: {e}"));
            assert_eq!(left, 0, "{api:?} v{version}: codec left bytes");
            assert_eq!(decoded, body, "{api:?} v{version}: decoded differently");
            for cut in 0..frame.len() {
                let truncated = &frame[..cut];
                assert!(
                    check(truncated, api, version).is_err(),
                    "{api:?} v{version}: guard accepted the first {cut} of {} bytes",
                    frame.len()
                );
                if cut >= 8 {
                    assert!(matches!(
                        guard_refusal_implies_codec_failure(truncated),
                        Some(Err(_))
                    ));
                }
            }
            frames += 1;
        }
    }
    // Default and populated bodies, at v1 and at the v2 of ShareFetch and ShareAcknowledge.
    assert_eq!(frames, 2 * SHARE_APIS.len() + 2 * 2);
}

/// ShareFetch and ShareAcknowledge v2 (KIP-1206, KIP-1222) are in Kafka's specs but not in
/// `kafka-protocol` 0.18: `share_v2` adds them, so they are supported (and advertised by
/// ApiVersions, which lists `SUPPORTED`) and decode through `decode_request`.
#[test]
fn share_fetch_and_acknowledge_v2_are_supported_through_share_v2() {
    for api in [ApiKey::ShareFetch, ApiKey::ShareAcknowledge] {
        assert_eq!(versions::supported(api), Some((1, 2)), "{api:?}");
        assert_eq!(
            api.valid_versions().max,
            1,
            "{api:?}: the codec now knows v2 (decode it there and drop share_v2)"
        );
        let header = RequestHeader::default()
            .with_request_api_key(api as i16)
            .with_request_api_version(2)
            .with_correlation_id(5);
        let frame = codec_encode(api, 2, &header, &default_body(api));
        check(&frame, api, 2).unwrap_or_else(|e| panic!("{api:?} v2: {e}"));
        let request = crate::codec::decode_request(Bytes::from(frame))
            .unwrap_or_else(|e| panic!("{api:?} v2: {e}"));
        assert_eq!((request.api_key, request.api_version), (api, 2));
        assert_eq!(request.body, default_body(api));
    }
}
