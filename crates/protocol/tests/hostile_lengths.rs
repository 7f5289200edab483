//! Regression tests for the crash where one small request declaring a huge array made the
//! broker abort on a failed allocation: for every supported (api, version) and every length
//! field a request of it can carry, a frame with that length set to a hostile value comes back
//! from `decode_request` as `Malformed`, and no single allocation made while decoding it is
//! larger than a small multiple of the frame.
//!
//! A counting global allocator records the largest single allocation the current thread makes
//! while a decode runs (other test threads are not counted).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::collections::BTreeSet;

use bytes::{Bytes, BytesMut};
use sluice_protocol::codec::{self, DecodeError};
use sluice_protocol::guard::{self, Encoding, LengthKind, sample};
use sluice_protocol::kafka_protocol::messages::{ApiKey, RequestHeader, RequestKind};
use sluice_protocol::kafka_protocol::protocol::{Decodable, Encodable};
use sluice_protocol::versions::SUPPORTED;

/// A refused frame may cost its decode one allocation of at most this many times its size...
const REFUSED_FRAME_MULTIPLE: usize = 2;
/// ...plus this much for the error message that names the field and the numbers.
const ERROR_MESSAGE_BYTES_MAX: usize = 512;
/// A valid frame may cost more: the codec's structs are larger than their smallest encoding (a
/// topic that takes 2 bytes on the wire is ~100 bytes in memory), so one allocation may reach
/// this many times the frame...
const ACCEPTED_FRAME_MULTIPLE: usize = 64;
/// ...plus this much for the fixed-size parts of the decoded request.
const ACCEPTED_FRAME_BYTES_EXTRA: usize = 4096;

struct PeakTracking;

thread_local! {
    static TRACKING: Cell<bool> = const { Cell::new(false) };
    static PEAK: Cell<usize> = const { Cell::new(0) };
}

fn note(size: usize) {
    // `try_with`: the allocator may run while this thread's locals are being torn down.
    let _ = TRACKING.try_with(|tracking| {
        if tracking.get() {
            let _ = PEAK.try_with(|peak| peak.set(peak.get().max(size)));
        }
    });
}

// SAFETY: every call is passed on unchanged to the system allocator; the bookkeeping only reads
// and writes const-initialised thread locals, which never allocate.
unsafe impl GlobalAlloc for PeakTracking {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: the caller upholds `GlobalAlloc::alloc`'s contract, which is `System`'s.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: as for `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(new_size);
        // SAFETY: as for `alloc`; `ptr` and `layout` come from this allocator, i.e. `System`.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` and `layout` come from this allocator, i.e. `System`.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: PeakTracking = PeakTracking;

/// Runs `f` and returns its result with the largest single allocation it made.
fn largest_allocation<T>(f: impl FnOnce() -> T) -> (T, usize) {
    PEAK.with(|p| p.set(0));
    TRACKING.with(|t| t.set(true));
    let out = f();
    TRACKING.with(|t| t.set(false));
    (out, PEAK.with(Cell::get))
}

fn supported_pairs() -> Vec<(ApiKey, i16)> {
    SUPPORTED
        .iter()
        .flat_map(|&(api, min, max)| (min..=max).map(move |v| (api, v)))
        .collect()
}

/// A populated frame as the codec writes it: built from the layout table, decoded and encoded
/// again by the codec (`kafka-protocol`, with `share_v2` for the versions it adds).
fn populated(api: ApiKey, version: i16, seed: u64) -> Vec<u8> {
    let frame = sample::request(api, version, seed as i32, &mut sample::Rng(seed)).unwrap();
    let mut buf = Bytes::from(frame);
    let header_version = api.request_header_version(version);
    let header = RequestHeader::decode(&mut buf, header_version).unwrap();
    let body = codec::decode_request_body(api, &mut buf, version).unwrap();
    let mut out = BytesMut::new();
    header.encode(&mut out, header_version).unwrap();
    codec::encode_request_body(&mut out, &body, version).unwrap();
    out.to_vec()
}

/// Hostile values for a length in `encoding`: far more than any frame carries, and negative.
fn hostile_values(encoding: Encoding) -> &'static [i64] {
    match encoding {
        Encoding::Int16 => &[0x7fff, -2, i16::MIN as i64],
        Encoding::Int32 => &[0x7fff_ffff, -2, i32::MIN as i64],
        // 0xffff_ffff is the largest five-byte varint: 2^32 - 2 elements or bytes.
        Encoding::Varint => &[0x7fff_ffff, 0xffff_ffff, 0x10_0000],
    }
}

fn assert_refused_cheaply(frame: &[u8], what: &str) {
    let len = frame.len();
    let bytes = Bytes::copy_from_slice(frame);
    let (result, peak) = largest_allocation(|| codec::decode_request(bytes));
    match result {
        Err(DecodeError::Malformed { .. }) => {}
        other => panic!("{what}: expected Malformed, got {other:?}"),
    }
    let bound = REFUSED_FRAME_MULTIPLE * len + ERROR_MESSAGE_BYTES_MAX;
    assert!(
        peak <= bound,
        "{what}: largest allocation {peak} bytes for a {len}-byte frame (bound {bound})"
    );
}

#[test]
fn the_reported_23_byte_frame_is_malformed_without_a_large_allocation() {
    // Size prefix 0x13, then Metadata v1, correlation id 7, client id "probe", 0x7fffffff topics.
    let wire = b"\x00\x00\x00\x13\x00\x03\x00\x01\x00\x00\x00\x07\x00\x05probe\x7f\xff\xff\xff";
    assert_eq!(wire.len(), 23);
    assert_refused_cheaply(&wire[4..], "Metadata v1 with 2^31-1 topics");
}

/// Every length of every supported request, in both encodings, set to hostile values.
#[test]
fn every_length_of_every_supported_request_refuses_hostile_values() {
    let mut cases = 0;
    for (api, version) in supported_pairs() {
        let mut to_reach: BTreeSet<String> =
            guard::length_paths(api, version).into_iter().collect();
        let mut tested = BTreeSet::new();
        for seed in 0..400 {
            if to_reach.is_empty() {
                break;
            }
            let frame = populated(api, version, seed);
            for field in guard::length_fields(&frame, api, version).unwrap() {
                if field.kind == (LengthKind::TagSize { known: true }) {
                    // kafka-protocol decodes a known tagged field by its type and never reads
                    // this size, so no value of it is hostile.
                    continue;
                }
                let path = guard::without_indexes(&field.path);
                to_reach.remove(&path);
                if !tested.insert((path.clone(), field.kind)) {
                    continue;
                }
                for &value in hostile_values(field.encoding) {
                    let bad = sample::rewrite(&frame, &field, value);
                    assert_refused_cheaply(&bad, &format!("{api:?} v{version} {path} = {value}"));
                    cases += 1;
                }
            }
        }
        assert!(
            to_reach.is_empty(),
            "{api:?} v{version}: no sample carried {to_reach:?}"
        );
    }
    assert!(cases > 3000, "only {cases} hostile frames");
}

/// Valid requests still decode, and what the codec reserves stays proportional to the frame.
#[test]
fn valid_requests_decode_with_allocations_proportional_to_the_frame() {
    let mut worst = (0usize, String::new());
    for (api, version) in supported_pairs() {
        for seed in 0..20 {
            let frame = populated(api, version, seed);
            let len = frame.len();
            let bytes = Bytes::from(frame);
            let (result, peak) = largest_allocation(|| codec::decode_request(bytes));
            result.unwrap_or_else(|e| panic!("{api:?} v{version} seed {seed}: {e}"));
            let bound = ACCEPTED_FRAME_MULTIPLE * len + ACCEPTED_FRAME_BYTES_EXTRA;
            assert!(
                peak <= bound,
                "{api:?} v{version} seed {seed}: largest allocation {peak} B for {len} B"
            );
            let per_byte = peak.saturating_sub(ACCEPTED_FRAME_BYTES_EXTRA / 4) / len;
            if per_byte > worst.0 {
                worst = (
                    per_byte,
                    format!("{api:?} v{version}: {peak} B for {len} B"),
                );
            }
        }
    }
    eprintln!("largest allocation per frame byte (beyond 1 KiB): {worst:?}");
}

/// The most an accepted frame can make the codec reserve per byte: an array of elements that
/// take the fewest bytes on the wire (Metadata v9 topics: a null name and an empty tag section,
/// 2 bytes each) against the size of the struct each becomes.
#[test]
fn many_smallest_elements_cost_a_bounded_multiple_of_the_frame() {
    use sluice_protocol::kafka_protocol::messages::MetadataRequest;
    use sluice_protocol::kafka_protocol::messages::metadata_request::MetadataRequestTopic;
    let topics = vec![MetadataRequestTopic::default().with_name(None); 10_000];
    let body = RequestKind::Metadata(MetadataRequest::default().with_topics(Some(topics)));
    let mut out = BytesMut::new();
    codec::encode_request(&mut out, ApiKey::Metadata, 9, 1, "c", &body).unwrap();
    let frame = out.split_off(4).freeze();
    let len = frame.len();
    let (result, peak) = largest_allocation(|| codec::decode_request(frame));
    result.unwrap();
    let bound = ACCEPTED_FRAME_MULTIPLE * len + ACCEPTED_FRAME_BYTES_EXTRA;
    eprintln!("Metadata v9, 10000 topics: largest allocation {peak} B for a {len} B frame");
    assert!(peak <= bound, "{peak} B for {len} B");
}
