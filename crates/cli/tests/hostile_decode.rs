//! Black-box test of the crash where one small request declaring a huge array made the broker
//! abort: the real `sluice serve` gets the reported 23-byte frame and a hostile frame for every
//! supported (api, version), each on its own connection, and must close just those connections
//! and go on serving: a connection opened before them still gets answers, and a produce/consume
//! round trip works afterwards.

mod common;

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use common::Server;
use sluice_protocol::codec;
use sluice_protocol::guard::{self, Encoding, LengthKind, sample};
use sluice_protocol::kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, RequestKind, ResponseKind,
};
use sluice_protocol::versions::SUPPORTED;

/// How long the broker may take to close a connection it got a malformed frame on, or to answer.
const REPLY_TIMEOUT: Duration = Duration::from_secs(10);

/// The reported frame: Metadata v1, correlation id 7, client id "probe", 0x7fffffff topics.
const REPORTED_FRAME: &[u8] =
    b"\x00\x00\x00\x13\x00\x03\x00\x01\x00\x00\x00\x07\x00\x05probe\x7f\xff\xff\xff";

fn connect(server: &Server) -> TcpStream {
    let stream = TcpStream::connect(("127.0.0.1", server.port)).expect("connect");
    stream.set_read_timeout(Some(REPLY_TIMEOUT)).unwrap();
    stream
}

/// Sends `wire` (size prefix included) on a new connection and asserts the broker closes it
/// without an answer.
fn assert_closed_after(server: &Server, wire: &[u8], what: &str) {
    let mut stream = connect(server);
    stream
        .write_all(wire)
        .unwrap_or_else(|e| panic!("{what}: write: {e}"));
    let started = Instant::now();
    let mut buf = [0u8; 64];
    match stream.read(&mut buf) {
        Ok(0) => {}
        Err(e) if matches!(e.kind(), ErrorKind::ConnectionReset | ErrorKind::BrokenPipe) => {}
        Ok(n) => panic!("{what}: the broker answered {n} bytes instead of closing"),
        Err(e) => panic!("{what}: not closed after {:?}: {e}", started.elapsed()),
    }
}

/// A frame with its size prefix.
fn with_prefix(frame: &[u8]) -> Vec<u8> {
    let mut wire = (frame.len() as i32).to_be_bytes().to_vec();
    wire.extend_from_slice(frame);
    wire
}

/// Hostile frames for `api` at `version`: a valid request with its first array count (or, with
/// no array, its first length) and its last length set far beyond the frame.
fn hostile_frames(api: ApiKey, version: i16) -> Vec<(String, Vec<u8>)> {
    let frame = (0..64)
        .map(|seed| sample::request(api, version, 3, &mut sample::Rng(seed)).expect("layout"))
        .find(|f| {
            guard::length_fields(f, api, version)
                .unwrap()
                .iter()
                .any(|l| l.kind == LengthKind::Array && l.raw > 0)
        })
        .unwrap_or_else(|| sample::request(api, version, 3, &mut sample::Rng(0)).unwrap());
    let lengths: Vec<_> = guard::length_fields(&frame, api, version)
        .unwrap()
        .into_iter()
        .filter(|l| l.kind != (LengthKind::TagSize { known: true }))
        .collect();
    let first = lengths
        .iter()
        .find(|l| l.kind == LengthKind::Array)
        .or(lengths.first());
    let picks = [first, lengths.last()];
    picks
        .into_iter()
        .flatten()
        .map(|field| {
            let value = match field.encoding {
                Encoding::Int16 => 0x7fff,
                Encoding::Int32 | Encoding::Varint => 0x7fff_ffff,
            };
            let what = format!("{api:?} v{version} {} = {value}", field.path);
            (what, sample::rewrite(&frame, field, value))
        })
        .collect()
}

/// Sends ApiVersions v3 on `stream` and waits for its answer.
fn api_versions_answered(stream: &mut TcpStream, correlation_id: i32) {
    let mut out = BytesMut::new();
    let body = RequestKind::ApiVersions(ApiVersionsRequest::default());
    codec::encode_request(
        &mut out,
        ApiKey::ApiVersions,
        3,
        correlation_id,
        "alive",
        &body,
    )
    .unwrap();
    stream.write_all(&out).unwrap();
    let mut size = [0u8; 4];
    stream.read_exact(&mut size).expect("ApiVersions answer");
    let mut frame = vec![0u8; i32::from_be_bytes(size) as usize];
    stream.read_exact(&mut frame).unwrap();
    let (correlation, response) =
        codec::decode_response(Bytes::from(frame), ApiKey::ApiVersions, 3).unwrap();
    assert_eq!(correlation, correlation_id);
    assert!(matches!(response, ResponseKind::ApiVersions(r) if r.error_code == 0));
}

#[test]
fn hostile_lengths_close_only_their_connection_and_the_broker_keeps_serving() {
    let server = Server::start_fresh();
    // A well-behaved connection, open before any hostile frame arrives.
    let mut bystander = connect(&server);
    api_versions_answered(&mut bystander, 1);

    assert_closed_after(&server, REPORTED_FRAME, "the reported Metadata v1 frame");
    let mut sent = 1;
    for &(api, min, max) in SUPPORTED {
        for version in min..=max {
            for (what, frame) in hostile_frames(api, version) {
                // The guard refuses it (so the broker's Malformed path is what is exercised).
                assert!(
                    matches!(
                        codec::decode_request(Bytes::from(frame.clone())),
                        Err(codec::DecodeError::Malformed { .. })
                    ),
                    "{what}"
                );
                assert_closed_after(&server, &with_prefix(&frame), &what);
                sent += 1;
            }
        }
    }
    assert!(sent > 300, "only {sent} hostile frames");

    // Still serving: the bystander connection answers, and a produce/consume round trip works.
    api_versions_answered(&mut bystander, 2);
    server.ok(&["produce", "after-hostile"], "one\ntwo\n");
    let consumed = server.ok(&["consume", "after-hostile"], "").stdout;
    assert_eq!(consumed, "one\ntwo\n");
    let (status, _dir) = server.stop();
    assert!(status.success(), "sluice exited with {status}");
}
