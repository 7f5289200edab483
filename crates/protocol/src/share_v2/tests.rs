//! ShareFetch and ShareAcknowledge v2 against three references: bytes Kafka's own writer produced
//! (the fixtures below), bytes written here field by field in the spec's order, and
//! `kafka-protocol`'s v1 encoding with the v2 fields spliced in where the spec puts them.

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::share_acknowledge_request::{
    AcknowledgePartition, AcknowledgeTopic, AcknowledgementBatch as AckBatch,
};
use kafka_protocol::messages::share_acknowledge_response::{
    LeaderIdAndEpoch as AckLeader, NodeEndpoint as AckNode, PartitionData as AckPartitionData,
    ShareAcknowledgeTopicResponse,
};
use kafka_protocol::messages::share_fetch_request::{
    AcknowledgementBatch as FetchBatch, FetchPartition, FetchTopic, ForgottenTopic,
};
use kafka_protocol::messages::share_fetch_response::{
    AcquiredRecords, LeaderIdAndEpoch as FetchLeader, NodeEndpoint as FetchNode,
    PartitionData as FetchPartitionData, ShareFetchableTopicResponse,
};
use kafka_protocol::messages::{
    ApiKey, BrokerId, GroupId, RequestHeader, RequestKind, ResponseKind, ShareAcknowledgeRequest,
    ShareAcknowledgeResponse, ShareFetchRequest, ShareFetchResponse,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

use super::*;
use crate::codec::{
    self, DecodeError, decode_request_body, decode_response_body, encode_request_body,
    encode_response_body,
};
use crate::guard;

// Fixtures: bodies (no header) written by Kafka 4.3.1's generated message classes
// (`org.apache.kafka.common.message.*Data.write`, via `MessageUtil.toByteBufferAccessor`) from
// the messages built in `ShareV2Reference.java` beside this file, which says how to run it; its
// output is these lines. Topic ids: every byte 0xa5 ("orders") or 0x3c ("audit").

/// `fetch_request()` with ShareAcquireMode 1 (record_limit), IsRenewAck false, at v2.
const SHARE_FETCH_REQUEST_V2_RECORD_LIMIT: &str = "0c73686172652d67726f7570096d656d6265722d3100000003000001f40000000100100000000001f4000000fa010002a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a503000000000300000000000000000000000000000009020100000000000000000a000000000000000c04040204000000000003010000023c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c03000000010000000200016403746167";
/// A renew-only fetch: ShareAcquireMode 0, IsRenewAck true, every fetch limit 0, at v2.
const SHARE_FETCH_REQUEST_V2_RENEW: &str = "0c73686172652d67726f7570096d656d6265722d310000000300000000000000000000000000000000000000fa000102a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a503000000000300000000000000000000000000000009020100000000000000000a000000000000000c04040204000000000003010000023c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c03000000010000000200016403746167";
/// `fetch_request()` at v1.
const SHARE_FETCH_REQUEST_V1: &str = "0c73686172652d67726f7570096d656d6265722d3100000003000001f40000000100100000000001f4000000fa02a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a503000000000300000000000000000000000000000009020100000000000000000a000000000000000c04040204000000000003010000023c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c03000000010000000200016403746167";
/// `ack_request()` with IsRenewAck true, at v2.
const SHARE_ACKNOWLEDGE_REQUEST_V2_RENEW: &str = "0c73686172652d67726f7570096d656d6265722d31000000040102a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5020000000202000000000000000500000000000000070404000400000000";
/// `ack_request()` at v1.
const SHARE_ACKNOWLEDGE_REQUEST_V1: &str = "0c73686172652d67726f7570096d656d6265722d310000000402a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5020000000202000000000000000500000000000000070404000400000000";
/// `fetch_response()` at v2 (and at v1: Kafka wrote the same bytes).
const SHARE_FETCH_RESPONSE_V2: &str = "000000000000000000753002a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5030000000000000000790a6261642073746174650000000100000005000601020304050200000000000000000000000000000004000200000000000100060b6e6f74206c65616465720000000000000200000007000101000002000000020962726f6b65722d3200002384000000";
const SHARE_FETCH_RESPONSE_V1: &str = SHARE_FETCH_RESPONSE_V2;
/// `ack_response()` with AcquisitionLockTimeoutMs 15000, at v2.
const SHARE_ACKNOWLEDGE_RESPONSE_V2: &str = "0000000000000000003a9802a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a50300000002000000000000010000000500000000000300790a626164207374617465ffffffffffffffff00000002000000020962726f6b65722d3200002384077261636b2d620000";
/// `ack_response()` at v1 (AcquisitionLockTimeoutMs is ignorable: left out).
const SHARE_ACKNOWLEDGE_RESPONSE_V1: &str = "0000000000000002a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a50300000002000000000000010000000500000000000300790a626164207374617465ffffffffffffffff00000002000000020962726f6b65722d3200002384077261636b2d620000";

fn unhex(hex: &str) -> Vec<u8> {
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).expect("hex"))
        .collect()
}

fn s(value: &'static str) -> StrBytes {
    StrBytes::from_static_str(value)
}

/// A topic id with every byte `b` (`kafka-protocol` does not re-export its `Uuid` type, so the
/// value comes from decoding a struct that carries one).
fn topic_id(b: u8) -> ForgottenTopic {
    let mut wire = vec![b; 16];
    wire.extend_from_slice(&[1, 0]); // no partitions, no tagged fields
    Decodable::decode(&mut Bytes::from(wire), 1).expect("forgotten topic")
}

/// The ShareFetch request of the fixtures, without the fields v2 adds.
fn fetch_request() -> ShareFetchRequest {
    let orders = topic_id(0xa5).topic_id;
    let audit = topic_id(0x3c).topic_id;
    ShareFetchRequest::default()
        .with_group_id(Some(GroupId(s("share-group"))))
        .with_member_id(Some(s("member-1")))
        .with_share_session_epoch(3)
        .with_max_wait_ms(500)
        .with_min_bytes(1)
        .with_max_bytes(1_048_576)
        .with_max_records(500)
        .with_batch_size(250)
        .with_topics(vec![
            FetchTopic::default()
                .with_topic_id(orders)
                .with_partitions(vec![
                    FetchPartition::default()
                        .with_partition_index(0)
                        .with_acknowledgement_batches(vec![
                            FetchBatch::default()
                                .with_first_offset(0)
                                .with_last_offset(9)
                                .with_acknowledge_types(vec![1]),
                            FetchBatch::default()
                                .with_first_offset(10)
                                .with_last_offset(12)
                                .with_acknowledge_types(vec![4, 2, 4]),
                        ]),
                    FetchPartition::default().with_partition_index(3),
                ]),
        ])
        .with_forgotten_topics_data(vec![
            ForgottenTopic::default()
                .with_topic_id(audit)
                .with_partitions(vec![1, 2]),
        ])
        .with_unknown_tagged_field(100, Bytes::from_static(b"tag"))
}

/// The renew-only form: nothing to fetch, every limit 0.
fn fetch_request_renew() -> ShareFetchRequest {
    fetch_request()
        .with_max_wait_ms(0)
        .with_min_bytes(0)
        .with_max_bytes(0)
        .with_max_records(0)
        .with_is_renew_ack(true)
}

/// The ShareAcknowledge request of the fixtures, without the field v2 adds.
fn ack_request() -> ShareAcknowledgeRequest {
    ShareAcknowledgeRequest::default()
        .with_group_id(Some(GroupId(s("share-group"))))
        .with_member_id(Some(s("member-1")))
        .with_share_session_epoch(4)
        .with_topics(vec![
            AcknowledgeTopic::default()
                .with_topic_id(topic_id(0xa5).topic_id)
                .with_partitions(vec![
                    AcknowledgePartition::default()
                        .with_partition_index(2)
                        .with_acknowledgement_batches(vec![
                            AckBatch::default()
                                .with_first_offset(5)
                                .with_last_offset(7)
                                .with_acknowledge_types(vec![4, 0, 4]),
                        ]),
                ]),
        ])
}

fn fetch_response() -> ShareFetchResponse {
    ShareFetchResponse::default()
        .with_acquisition_lock_timeout_ms(30_000)
        .with_responses(vec![
            ShareFetchableTopicResponse::default()
                .with_topic_id(topic_id(0xa5).topic_id)
                .with_partitions(vec![
                    FetchPartitionData::default()
                        .with_partition_index(0)
                        .with_acknowledge_error_code(121)
                        .with_acknowledge_error_message(Some(s("bad state")))
                        .with_current_leader(
                            FetchLeader::default()
                                .with_leader_id(1)
                                .with_leader_epoch(5),
                        )
                        .with_records(Some(Bytes::from_static(&[1, 2, 3, 4, 5])))
                        .with_acquired_records(vec![
                            AcquiredRecords::default()
                                .with_first_offset(0)
                                .with_last_offset(4)
                                .with_delivery_count(2),
                        ]),
                    FetchPartitionData::default()
                        .with_partition_index(1)
                        .with_error_code(6)
                        .with_error_message(Some(s("not leader")))
                        .with_current_leader(
                            FetchLeader::default()
                                .with_leader_id(2)
                                .with_leader_epoch(7),
                        )
                        .with_records(Some(Bytes::new())),
                ]),
        ])
        .with_node_endpoints(vec![
            FetchNode::default()
                .with_node_id(BrokerId(2))
                .with_host(s("broker-2"))
                .with_port(9092)
                .with_rack(None),
        ])
}

/// The ShareAcknowledge response of the fixtures, without the field v2 adds.
fn ack_response() -> ShareAcknowledgeResponse {
    ShareAcknowledgeResponse::default()
        .with_responses(vec![
            ShareAcknowledgeTopicResponse::default()
                .with_topic_id(topic_id(0xa5).topic_id)
                .with_partitions(vec![
                    AckPartitionData::default()
                        .with_partition_index(2)
                        .with_current_leader(
                            AckLeader::default().with_leader_id(1).with_leader_epoch(5),
                        ),
                    AckPartitionData::default()
                        .with_partition_index(3)
                        .with_error_code(121)
                        .with_error_message(Some(s("bad state")))
                        .with_current_leader(
                            AckLeader::default()
                                .with_leader_id(-1)
                                .with_leader_epoch(-1),
                        ),
                ]),
        ])
        .with_node_endpoints(vec![
            AckNode::default()
                .with_node_id(BrokerId(2))
                .with_host(s("broker-2"))
                .with_port(9092)
                .with_rack(Some(s("rack-b"))),
        ])
}

fn encode_request(body: &RequestKind, version: i16) -> Vec<u8> {
    let mut out = BytesMut::new();
    encode_request_body(&mut out, body, version).unwrap_or_else(|e| panic!("v{version}: {e}"));
    out.to_vec()
}

fn encode_response(body: &ResponseKind, version: i16) -> Vec<u8> {
    let mut out = BytesMut::new();
    encode_response_body(&mut out, body, version).unwrap_or_else(|e| panic!("v{version}: {e}"));
    out.to_vec()
}

/// Decodes a whole request body, which must be consumed to its last byte.
fn decode_request(api: ApiKey, wire: &[u8], version: i16) -> Result<RequestKind, String> {
    let mut buf = Bytes::copy_from_slice(wire);
    let body = decode_request_body(api, &mut buf, version)?;
    assert!(
        buf.is_empty(),
        "{api:?} v{version}: {} bytes left",
        buf.len()
    );
    Ok(body)
}

fn decode_response(api: ApiKey, wire: &[u8], version: i16) -> ResponseKind {
    let mut buf = Bytes::copy_from_slice(wire);
    let body = decode_response_body(api, &mut buf, version)
        .unwrap_or_else(|e| panic!("{api:?} v{version}: {e}"));
    assert!(
        buf.is_empty(),
        "{api:?} v{version}: {} bytes left",
        buf.len()
    );
    body
}

/// A request frame (header v2, no size prefix) around `body`.
fn request_frame(api: ApiKey, version: i16, body: &[u8]) -> Vec<u8> {
    let mut out = BytesMut::new();
    RequestHeader::default()
        .with_request_api_key(api as i16)
        .with_request_api_version(version)
        .with_correlation_id(42)
        .with_client_id(Some(s("share-client")))
        .encode(&mut out, api.request_header_version(version))
        .unwrap();
    out.extend_from_slice(body);
    out.to_vec()
}

/// Bytes written field by field, with the primitives of Kafka's flexible versions.
#[derive(Default)]
struct Spec(Vec<u8>);

impl Spec {
    fn uvarint(&mut self, mut v: u32) -> &mut Self {
        while v >= 0x80 {
            self.0.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.0.push(v as u8);
        self
    }
    fn int8(&mut self, v: i8) -> &mut Self {
        self.0.push(v as u8);
        self
    }
    fn boolean(&mut self, v: bool) -> &mut Self {
        self.0.push(u8::from(v));
        self
    }
    fn int16(&mut self, v: i16) -> &mut Self {
        self.0.put_i16(v);
        self
    }
    fn int32(&mut self, v: i32) -> &mut Self {
        self.0.put_i32(v);
        self
    }
    fn int64(&mut self, v: i64) -> &mut Self {
        self.0.put_i64(v);
        self
    }
    fn uuid(&mut self, every_byte: u8) -> &mut Self {
        self.0.extend_from_slice(&[every_byte; 16]);
        self
    }
    /// A compact nullable string (or compact bytes): length + 1, 0 for null.
    fn string(&mut self, v: Option<&[u8]>) -> &mut Self {
        match v {
            None => self.uvarint(0),
            Some(v) => {
                self.uvarint(v.len() as u32 + 1);
                self.0.extend_from_slice(v);
                self
            }
        }
    }
    /// A compact array's count (elements follow).
    fn array(&mut self, count: usize) -> &mut Self {
        self.uvarint(count as u32 + 1)
    }
    /// An empty tagged-field section.
    fn no_tags(&mut self) -> &mut Self {
        self.uvarint(0)
    }
}

/// ShareFetchRequest v2 per the spec's field order, with the values of `fetch_request()`.
fn share_fetch_request_by_spec(mode: i8, renew: bool) -> Vec<u8> {
    let (max_wait, min_bytes, max_bytes, max_records) = if renew {
        (0, 0, 0, 0)
    } else {
        (500, 1, 1_048_576, 500)
    };
    let mut w = Spec::default();
    w.string(Some(b"share-group")) // GroupId
        .string(Some(b"member-1")) // MemberId
        .int32(3) // ShareSessionEpoch
        .int32(max_wait) // MaxWaitMs
        .int32(min_bytes) // MinBytes
        .int32(max_bytes) // MaxBytes
        .int32(max_records) // MaxRecords (1+)
        .int32(250) // BatchSize (1+)
        .int8(mode) // ShareAcquireMode (2+)
        .boolean(renew) // IsRenewAck (2+)
        .array(1) // Topics
        .uuid(0xa5) // .TopicId
        .array(2) // .Partitions
        .int32(0) // ..PartitionIndex (PartitionMaxBytes is v0 only)
        .array(2) // ..AcknowledgementBatches
        .int64(0)
        .int64(9)
        .array(1)
        .int8(1)
        .no_tags()
        .int64(10)
        .int64(12)
        .array(3)
        .int8(4)
        .int8(2)
        .int8(4)
        .no_tags()
        .no_tags() // end of partition 0
        .int32(3)
        .array(0)
        .no_tags() // end of partition 3
        .no_tags() // end of the topic
        .array(1) // ForgottenTopicsData
        .uuid(0x3c)
        .array(2)
        .int32(1)
        .int32(2)
        .no_tags()
        .uvarint(1) // one tagged field: tag 100, 3 bytes
        .uvarint(100)
        .uvarint(3);
    w.0.extend_from_slice(b"tag");
    w.0
}

/// ShareAcknowledgeRequest v2 per the spec's field order, with the values of `ack_request()`.
fn share_acknowledge_request_by_spec(renew: bool) -> Vec<u8> {
    let mut w = Spec::default();
    w.string(Some(b"share-group")) // GroupId
        .string(Some(b"member-1")) // MemberId
        .int32(4) // ShareSessionEpoch
        .boolean(renew) // IsRenewAck (2+)
        .array(1) // Topics
        .uuid(0xa5)
        .array(1) // .Partitions
        .int32(2)
        .array(1) // ..AcknowledgementBatches
        .int64(5)
        .int64(7)
        .array(3)
        .int8(4)
        .int8(0)
        .int8(4)
        .no_tags()
        .no_tags()
        .no_tags()
        .no_tags(); // top level
    w.0
}

/// ShareAcknowledgeResponse v2 per the spec's field order, with the values of `ack_response()`.
fn share_acknowledge_response_by_spec(lock_timeout_ms: i32) -> Vec<u8> {
    let mut w = Spec::default();
    w.int32(0) // ThrottleTimeMs
        .int16(0) // ErrorCode
        .string(None) // ErrorMessage
        .int32(lock_timeout_ms) // AcquisitionLockTimeoutMs (2+)
        .array(1) // Responses
        .uuid(0xa5)
        .array(2) // .Partitions
        .int32(2)
        .int16(0)
        .string(None)
        .int32(1) // ..CurrentLeader
        .int32(5)
        .no_tags()
        .no_tags()
        .int32(3)
        .int16(121)
        .string(Some(b"bad state"))
        .int32(-1)
        .int32(-1)
        .no_tags()
        .no_tags()
        .no_tags() // end of the topic
        .array(1) // NodeEndpoints
        .int32(2)
        .string(Some(b"broker-2"))
        .int32(9092)
        .string(Some(b"rack-b"))
        .no_tags()
        .no_tags(); // top level
    w.0
}

/// ShareFetchResponse v2 per the spec's field order: the same fields as v1.
fn share_fetch_response_by_spec() -> Vec<u8> {
    let mut w = Spec::default();
    w.int32(0) // ThrottleTimeMs
        .int16(0) // ErrorCode
        .string(None) // ErrorMessage
        .int32(30_000) // AcquisitionLockTimeoutMs (1+)
        .array(1) // Responses
        .uuid(0xa5)
        .array(2) // .Partitions
        .int32(0) // ..PartitionIndex
        .int16(0) // ..ErrorCode
        .string(None) // ..ErrorMessage
        .int16(121) // ..AcknowledgeErrorCode
        .string(Some(b"bad state")) // ..AcknowledgeErrorMessage
        .int32(1) // ..CurrentLeader
        .int32(5)
        .no_tags()
        .string(Some(&[1, 2, 3, 4, 5])) // ..Records
        .array(1) // ..AcquiredRecords
        .int64(0)
        .int64(4)
        .int16(2)
        .no_tags()
        .no_tags() // end of partition 0
        .int32(1)
        .int16(6)
        .string(Some(b"not leader"))
        .int16(0)
        .string(None)
        .int32(2)
        .int32(7)
        .no_tags()
        .string(Some(b""))
        .array(0)
        .no_tags() // end of partition 1
        .no_tags() // end of the topic
        .array(1) // NodeEndpoints
        .int32(2)
        .string(Some(b"broker-2"))
        .int32(9092)
        .string(None)
        .no_tags()
        .no_tags(); // top level
    w.0
}

#[test]
fn the_spec_writer_agrees_with_kafka() {
    let cases = [
        (
            share_fetch_request_by_spec(1, false),
            SHARE_FETCH_REQUEST_V2_RECORD_LIMIT,
        ),
        (
            share_fetch_request_by_spec(0, true),
            SHARE_FETCH_REQUEST_V2_RENEW,
        ),
        (
            share_acknowledge_request_by_spec(true),
            SHARE_ACKNOWLEDGE_REQUEST_V2_RENEW,
        ),
        (share_fetch_response_by_spec(), SHARE_FETCH_RESPONSE_V2),
        (
            share_acknowledge_response_by_spec(15_000),
            SHARE_ACKNOWLEDGE_RESPONSE_V2,
        ),
    ];
    for (i, (ours, kafka)) in cases.into_iter().enumerate() {
        assert_eq!(ours, unhex(kafka), "case {i}");
    }
}

#[test]
fn share_fetch_v2_requests_from_kafka_decode_to_the_v1_struct_plus_mode_and_renew() {
    let cases = [
        (
            SHARE_FETCH_REQUEST_V2_RECORD_LIMIT,
            fetch_request().with_share_acquire_mode(ShareAcquireMode::RecordLimit),
            Ok(ShareAcquireMode::RecordLimit),
            false,
        ),
        (
            SHARE_FETCH_REQUEST_V2_RENEW,
            fetch_request_renew(),
            Ok(ShareAcquireMode::BatchOptimized),
            true,
        ),
    ];
    for (wire, expected, mode, renew) in cases {
        let wire = unhex(wire);
        let RequestKind::ShareFetch(request) =
            decode_request(ApiKey::ShareFetch, &wire, 2).unwrap()
        else {
            panic!("not a ShareFetch")
        };
        assert_eq!(request, expected);
        assert_eq!(request.share_acquire_mode(), mode);
        assert_eq!(request.is_renew_ack(), renew);
        // Only the wire's own tagged field is visible as one.
        let mut plain = request.clone();
        plain.unknown_tagged_fields.remove(&CARRIED_TAG);
        assert_eq!(
            plain.unknown_tagged_fields.keys().collect::<Vec<_>>(),
            [&100]
        );
        // And back, byte for byte.
        assert_eq!(encode_request(&RequestKind::ShareFetch(request), 2), wire);
    }
}

#[test]
fn share_fetch_v1_from_kafka_reads_as_batch_optimized_without_renew() {
    let wire = unhex(SHARE_FETCH_REQUEST_V1);
    let RequestKind::ShareFetch(request) = decode_request(ApiKey::ShareFetch, &wire, 1).unwrap()
    else {
        panic!("not a ShareFetch")
    };
    assert_eq!(request, fetch_request());
    assert_eq!(
        request.share_acquire_mode(),
        Ok(ShareAcquireMode::BatchOptimized)
    );
    assert!(!request.is_renew_ack());
    assert_eq!(encode_request(&RequestKind::ShareFetch(request), 1), wire);
}

#[test]
fn share_acknowledge_v2_requests_from_kafka_decode_to_the_v1_struct_plus_renew() {
    let wire = unhex(SHARE_ACKNOWLEDGE_REQUEST_V2_RENEW);
    let RequestKind::ShareAcknowledge(request) =
        decode_request(ApiKey::ShareAcknowledge, &wire, 2).unwrap()
    else {
        panic!("not a ShareAcknowledge")
    };
    assert_eq!(request, ack_request().with_is_renew_ack(true));
    assert!(request.is_renew_ack());
    assert_eq!(
        encode_request(&RequestKind::ShareAcknowledge(request), 2),
        wire
    );

    let wire = unhex(SHARE_ACKNOWLEDGE_REQUEST_V1);
    let RequestKind::ShareAcknowledge(request) =
        decode_request(ApiKey::ShareAcknowledge, &wire, 1).unwrap()
    else {
        panic!("not a ShareAcknowledge")
    };
    assert_eq!(request, ack_request());
    assert!(!request.is_renew_ack());
    assert_eq!(
        encode_request(&RequestKind::ShareAcknowledge(request), 1),
        wire
    );
}

/// `kafka-protocol`'s v1 encoding with the v2 bytes put in where the spec says, the offset
/// counted here from the field sizes (not with the layer's own scan).
#[test]
fn kafka_protocols_v1_with_the_v2_fields_spliced_in_decodes_to_the_same_struct() {
    let request = fetch_request();
    let mut v1 = BytesMut::new();
    request.encode(&mut v1, 1).unwrap();
    // GroupId "share-group" (1 + 11), MemberId "member-1" (1 + 8), then six int32s.
    let at = (1 + 11) + (1 + 8) + 6 * 4;
    for (mode, renew) in [
        (0i8, false),
        (1, false),
        (0, true),
        (1, true),
        (7, true),
        (-1, false),
    ] {
        let mut v2 = v1[..at].to_vec();
        v2.extend_from_slice(&[mode as u8, u8::from(renew)]);
        v2.extend_from_slice(&v1[at..]);
        let RequestKind::ShareFetch(decoded) = decode_request(ApiKey::ShareFetch, &v2, 2).unwrap()
        else {
            panic!("not a ShareFetch")
        };
        assert_eq!(decoded.share_acquire_mode_id(), mode);
        assert_eq!(decoded.is_renew_ack(), renew);
        assert_eq!(
            decoded,
            request
                .clone()
                .with_share_acquire_mode_id(mode)
                .with_is_renew_ack(renew)
        );
        // With the v2 fields at their defaults it is the very struct v1 decodes to.
        if (mode, renew) == (0, false) {
            assert_eq!(decoded, request);
        }
        assert_eq!(encode_request(&RequestKind::ShareFetch(decoded), 2), v2);
    }

    let request = ack_request();
    let mut v1 = BytesMut::new();
    request.encode(&mut v1, 1).unwrap();
    let at = (1 + 11) + (1 + 8) + 4;
    for renew in [false, true] {
        let mut v2 = v1[..at].to_vec();
        v2.push(u8::from(renew));
        v2.extend_from_slice(&v1[at..]);
        let RequestKind::ShareAcknowledge(decoded) =
            decode_request(ApiKey::ShareAcknowledge, &v2, 2).unwrap()
        else {
            panic!("not a ShareAcknowledge")
        };
        assert_eq!(decoded, request.clone().with_is_renew_ack(renew));
        assert_eq!(
            encode_request(&RequestKind::ShareAcknowledge(decoded), 2),
            v2
        );
    }
}

/// Null and long strings before the v2 fields move them: a null GroupId takes one byte, a
/// 200-byte MemberId a two-byte length.
#[test]
fn the_v2_fields_are_found_behind_null_and_long_strings() {
    let long = "m".repeat(200);
    let request = fetch_request()
        .with_group_id(None)
        .with_member_id(Some(StrBytes::from_string(long.clone())))
        .with_share_acquire_mode(ShareAcquireMode::RecordLimit)
        .with_is_renew_ack(true);
    let wire = encode_request(&RequestKind::ShareFetch(request.clone()), 2);
    let at = 1 + (2 + 200) + 6 * 4;
    assert_eq!(&wire[at..at + 2], &[1, 1]);
    assert_eq!(wire[1..3], [201 | 0x80, 1], "two-byte varint 201");
    let RequestKind::ShareFetch(decoded) = decode_request(ApiKey::ShareFetch, &wire, 2).unwrap()
    else {
        panic!("not a ShareFetch")
    };
    assert_eq!(decoded, request);

    let request = ack_request()
        .with_group_id(None)
        .with_member_id(Some(StrBytes::from_string(long)))
        .with_is_renew_ack(true);
    let wire = encode_request(&RequestKind::ShareAcknowledge(request.clone()), 2);
    assert_eq!(wire[1 + (2 + 200) + 4], 1);
    assert_eq!(
        decode_request(ApiKey::ShareAcknowledge, &wire, 2).unwrap(),
        RequestKind::ShareAcknowledge(request)
    );
}

/// Modes 0 and 1 are Kafka's; anything else (255 was "renew" in a draft of the spec) comes
/// through decoding, for the broker to answer INVALID_REQUEST, rather than closing the
/// connection as for a malformed frame.
#[test]
fn unknown_acquire_modes_are_carried_for_the_broker_to_refuse() {
    assert_eq!(
        ShareAcquireMode::from_id(0),
        Some(ShareAcquireMode::BatchOptimized)
    );
    assert_eq!(
        ShareAcquireMode::from_id(1),
        Some(ShareAcquireMode::RecordLimit)
    );
    for mode in [
        ShareAcquireMode::BatchOptimized,
        ShareAcquireMode::RecordLimit,
    ] {
        assert_eq!(ShareAcquireMode::from_id(mode.id()), Some(mode));
    }
    for id in [2i8, -1, i8::MAX, i8::MIN] {
        let wire = share_fetch_request_by_spec(id, false);
        let frame = request_frame(ApiKey::ShareFetch, 2, &wire);
        let request = codec::decode_request(Bytes::from(frame)).expect("decodes");
        let RequestKind::ShareFetch(body) = request.body else {
            panic!("not a ShareFetch")
        };
        assert_eq!(body.share_acquire_mode(), Err(InvalidShareAcquireMode(id)));
        assert_eq!(body.share_acquire_mode_id(), id);
        assert!(
            InvalidShareAcquireMode(id)
                .to_string()
                .contains(&id.to_string())
        );
    }
}

/// A bool is true for any non-zero byte, as Kafka and `kafka-protocol` read it, and written
/// back as 1.
#[test]
fn renew_flags_other_than_one_read_as_true() {
    let mut wire = share_fetch_request_by_spec(1, true);
    let at = (1 + 11) + (1 + 8) + 6 * 4 + 1;
    assert_eq!(wire[at], 1);
    wire[at] = 0x80;
    let RequestKind::ShareFetch(request) = decode_request(ApiKey::ShareFetch, &wire, 2).unwrap()
    else {
        panic!("not a ShareFetch")
    };
    assert!(request.is_renew_ack());
    assert_eq!(
        encode_request(&RequestKind::ShareFetch(request), 2),
        share_fetch_request_by_spec(1, true)
    );
}

/// Every strict prefix of a v2 body fails to decode (and is refused by the guard as a frame);
/// the whole frame passes the guard and `decode_request`.
#[test]
fn truncated_v2_requests_are_refused() {
    let cases = [
        (ApiKey::ShareFetch, share_fetch_request_by_spec(1, true)),
        (
            ApiKey::ShareFetch,
            unhex(SHARE_FETCH_REQUEST_V2_RECORD_LIMIT),
        ),
        (
            ApiKey::ShareAcknowledge,
            share_acknowledge_request_by_spec(true),
        ),
    ];
    for (api, wire) in cases {
        for cut in 0..wire.len() {
            assert!(
                decode_request(api, &wire[..cut], 2).is_err(),
                "{api:?} v2 body cut at {cut} of {} decoded",
                wire.len()
            );
        }
        let frame = request_frame(api, 2, &wire);
        let header_len = frame.len() - wire.len();
        guard::check(&frame, api, 2).unwrap_or_else(|e| panic!("{api:?} v2: guard: {e}"));
        let request = codec::decode_request(Bytes::from(frame.clone())).expect("whole frame");
        assert_eq!((request.api_key, request.api_version), (api, 2));
        assert_eq!(request.correlation_id, 42);
        for cut in 8..frame.len() {
            match codec::decode_request(Bytes::copy_from_slice(&frame[..cut])) {
                Err(DecodeError::Malformed {
                    api_version: 2,
                    correlation_id: 42,
                    ..
                }) => {}
                other => panic!("{api:?} v2 frame cut at {cut} (header {header_len}): {other:?}"),
            }
            assert!(
                guard::check(&frame[..cut], api, 2).is_err(),
                "guard, cut {cut}"
            );
        }
    }
}

/// The layer's own errors say where the frame ended.
#[test]
fn a_body_ending_at_the_v2_fields_names_them() {
    let wire = share_fetch_request_by_spec(1, true);
    let at = (1 + 11) + (1 + 8) + 6 * 4;
    let error = decode_request(ApiKey::ShareFetch, &wire[..at + 1], 2).unwrap_err();
    assert!(error.contains("ShareFetchRequest v2"), "{error}");
    assert!(error.contains("inside the fields v2 adds"), "{error}");
    let error = decode_request(ApiKey::ShareFetch, &wire[..5], 2).unwrap_err();
    assert!(error.contains("before the ones v2 adds"), "{error}");
}

/// The key the v2 fields are kept under never comes from the wire: a (meaningless) tag 2^31 is
/// dropped, at v1 and at v2, and never read as v2 fields.
#[test]
fn a_wire_tag_landing_on_the_carried_key_is_dropped() {
    let request = fetch_request();
    let mut v1 = BytesMut::new();
    request.encode(&mut v1, 1).unwrap();
    // Replace the tagged fields (1 field: tag 100, "tag") by two: 100 and 2^31, with [1, 1].
    let tail = 1 + 1 + 1 + 3;
    let mut wire = v1[..v1.len() - tail].to_vec();
    let mut w = Spec::default();
    w.uvarint(2).uvarint(100).uvarint(3);
    w.0.extend_from_slice(b"tag");
    w.uvarint(1 << 31).uvarint(2).int8(1).int8(1);
    wire.extend_from_slice(&w.0);
    let RequestKind::ShareFetch(decoded) = decode_request(ApiKey::ShareFetch, &wire, 1).unwrap()
    else {
        panic!("not a ShareFetch")
    };
    assert_eq!(decoded, request);
    assert_eq!(
        decoded.share_acquire_mode(),
        Ok(ShareAcquireMode::BatchOptimized)
    );
    assert!(!decoded.is_renew_ack());

    // At v2, the wire's v2 fields win over the tag.
    let at = (1 + 11) + (1 + 8) + 6 * 4;
    let mut v2 = wire[..at].to_vec();
    v2.extend_from_slice(&[0, 0]);
    v2.extend_from_slice(&wire[at..]);
    assert_eq!(
        decode_request(ApiKey::ShareFetch, &v2, 2).unwrap(),
        RequestKind::ShareFetch(request)
    );
}

/// Below v2, IsRenewAck (not ignorable) cannot be written; ShareAcquireMode (ignorable) is left
/// out, as Kafka's writer does.
#[test]
fn v1_cannot_carry_a_renew_flag_and_leaves_the_mode_out() {
    let renew = RequestKind::ShareFetch(fetch_request().with_is_renew_ack(true));
    let mut out = BytesMut::new();
    let error = encode_request_body(&mut out, &renew, 1).unwrap_err();
    assert!(error.contains("v1 cannot carry"), "{error}");
    let renew = RequestKind::ShareAcknowledge(ack_request().with_is_renew_ack(true));
    assert!(encode_request_body(&mut BytesMut::new(), &renew, 1).is_err());

    let mode = RequestKind::ShareFetch(
        fetch_request().with_share_acquire_mode(ShareAcquireMode::RecordLimit),
    );
    assert_eq!(encode_request(&mode, 1), unhex(SHARE_FETCH_REQUEST_V1));

    // And a whole frame with a renew flag at v1 is refused with nothing left in the buffer.
    let mut out = BytesMut::from(&b"before"[..]);
    let body = RequestKind::ShareAcknowledge(ack_request().with_is_renew_ack(true));
    assert!(codec::encode_request(&mut out, ApiKey::ShareAcknowledge, 1, 1, "c", &body).is_err());
    assert_eq!(&out[..], b"before");
}

#[test]
fn setters_keep_each_other_and_defaults_store_nothing() {
    let request = fetch_request()
        .with_share_acquire_mode(ShareAcquireMode::RecordLimit)
        .with_is_renew_ack(true);
    assert_eq!(request.share_acquire_mode_id(), 1);
    assert!(request.is_renew_ack());
    let request = request.with_is_renew_ack(false);
    assert_eq!(request.share_acquire_mode_id(), 1);
    assert!(request.unknown_tagged_fields.contains_key(&CARRIED_TAG));
    let request = request.with_share_acquire_mode(ShareAcquireMode::BatchOptimized);
    assert_eq!(request, fetch_request());

    let response = ack_response().with_acquisition_lock_timeout_ms(-5);
    assert_eq!(response.acquisition_lock_timeout_ms(), -5);
    assert_eq!(response.with_acquisition_lock_timeout_ms(0), ack_response());
    assert!(
        !ack_request()
            .with_is_renew_ack(true)
            .with_is_renew_ack(false)
            .unknown_tagged_fields
            .contains_key(&CARRIED_TAG)
    );
}

/// ShareFetchResponse v2 is v1 on the wire: the v1 struct encodes to Kafka's v2 bytes, which
/// are Kafka's v1 bytes, and decodes back from them.
#[test]
fn share_fetch_responses_are_the_same_at_v1_and_v2() {
    assert_eq!(SHARE_FETCH_RESPONSE_V1, SHARE_FETCH_RESPONSE_V2);
    let body = ResponseKind::ShareFetch(fetch_response());
    for version in [1, 2] {
        assert_eq!(
            encode_response(&body, version),
            unhex(SHARE_FETCH_RESPONSE_V2),
            "v{version}"
        );
        assert_eq!(
            decode_response(ApiKey::ShareFetch, &unhex(SHARE_FETCH_RESPONSE_V2), version),
            body,
            "v{version}"
        );
    }
    assert_eq!(
        share_fetch_response_by_spec(),
        unhex(SHARE_FETCH_RESPONSE_V2)
    );
}

/// ShareAcknowledgeResponse v2 has AcquisitionLockTimeoutMs after ErrorMessage; v1 goes
/// without it.
#[test]
fn share_acknowledge_responses_carry_the_lock_timeout_at_v2() {
    let body =
        ResponseKind::ShareAcknowledge(ack_response().with_acquisition_lock_timeout_ms(15_000));
    assert_eq!(
        encode_response(&body, 2),
        unhex(SHARE_ACKNOWLEDGE_RESPONSE_V2)
    );
    assert_eq!(
        encode_response(&body, 1),
        unhex(SHARE_ACKNOWLEDGE_RESPONSE_V1)
    );
    assert_eq!(
        decode_response(
            ApiKey::ShareAcknowledge,
            &unhex(SHARE_ACKNOWLEDGE_RESPONSE_V2),
            2
        ),
        body
    );
    assert_eq!(
        decode_response(
            ApiKey::ShareAcknowledge,
            &unhex(SHARE_ACKNOWLEDGE_RESPONSE_V1),
            1
        ),
        ResponseKind::ShareAcknowledge(ack_response())
    );
    // Unset, it is 0 (Kafka's client reads 0 as "not given").
    assert_eq!(
        encode_response(&ResponseKind::ShareAcknowledge(ack_response()), 2),
        share_acknowledge_response_by_spec(0)
    );
    // An error message moves it.
    let with_message = ack_response()
        .with_error_code(58)
        .with_error_message(Some(s("invalid share session epoch")))
        .with_acquisition_lock_timeout_ms(1);
    let wire = encode_response(&ResponseKind::ShareAcknowledge(with_message.clone()), 2);
    let at = 4 + 2 + 1 + "invalid share session epoch".len();
    assert_eq!(&wire[at..at + 4], &1i32.to_be_bytes());
    assert_eq!(
        decode_response(ApiKey::ShareAcknowledge, &wire, 2),
        ResponseKind::ShareAcknowledge(with_message)
    );
}

/// A whole v2 response frame: size prefix, response header v1 (correlation id, no tagged
/// fields), then the body.
#[test]
fn whole_v2_response_frames() {
    let cases = [
        (
            ApiKey::ShareFetch,
            ResponseKind::ShareFetch(fetch_response()),
            SHARE_FETCH_RESPONSE_V2,
        ),
        (
            ApiKey::ShareAcknowledge,
            ResponseKind::ShareAcknowledge(ack_response().with_acquisition_lock_timeout_ms(15_000)),
            SHARE_ACKNOWLEDGE_RESPONSE_V2,
        ),
    ];
    for (api, body, wire) in cases {
        let mut out = BytesMut::from(&b"earlier"[..]);
        codec::encode_response(&mut out, api, 2, 99, &body).unwrap();
        let mut expected = b"earlier".to_vec();
        let wire = unhex(wire);
        expected.extend_from_slice(&(4 + 1 + wire.len() as i32).to_be_bytes());
        expected.extend_from_slice(&99i32.to_be_bytes());
        expected.push(0); // header tagged fields
        expected.extend_from_slice(&wire);
        assert_eq!(&out[..], &expected[..], "{api:?}");
        let frame = Bytes::copy_from_slice(&out[7 + 4..]);
        assert_eq!(codec::decode_response(frame, api, 2).unwrap(), (99, body));
    }
}

/// Whole v2 request frames through the public entry points, as a client and the server use them.
#[test]
fn whole_v2_request_frames_round_trip() {
    let bodies = [
        (
            ApiKey::ShareFetch,
            RequestKind::ShareFetch(
                fetch_request().with_share_acquire_mode(ShareAcquireMode::RecordLimit),
            ),
        ),
        (
            ApiKey::ShareFetch,
            RequestKind::ShareFetch(fetch_request_renew()),
        ),
        (
            ApiKey::ShareAcknowledge,
            RequestKind::ShareAcknowledge(ack_request().with_is_renew_ack(true)),
        ),
        (
            ApiKey::ShareAcknowledge,
            RequestKind::ShareAcknowledge(ShareAcknowledgeRequest::default()),
        ),
        (
            ApiKey::ShareFetch,
            RequestKind::ShareFetch(ShareFetchRequest::default()),
        ),
    ];
    for (api, body) in bodies {
        let mut out = BytesMut::new();
        codec::encode_request(&mut out, api, 2, 8, "share-client", &body).unwrap();
        let request = codec::decode_request(Bytes::copy_from_slice(&out[4..]))
            .unwrap_or_else(|e| panic!("{api:?}: {e}"));
        assert_eq!(
            (request.api_key, request.api_version, request.correlation_id),
            (api, 2, 8)
        );
        assert_eq!(request.client_id.as_deref(), Some("share-client"));
        assert_eq!(request.body, body);
    }
}

#[test]
fn versions_other_than_two_are_the_codecs() {
    // v0 (early access, removed) and v3 (unknown) fail as kafka-protocol fails them.
    for version in [0, 3] {
        assert!(
            decode_request(ApiKey::ShareFetch, &unhex(SHARE_FETCH_REQUEST_V1), version).is_err()
        );
        assert!(
            encode_response_body(
                &mut BytesMut::new(),
                &ResponseKind::ShareAcknowledge(ack_response()),
                version
            )
            .is_err()
        );
    }
}
