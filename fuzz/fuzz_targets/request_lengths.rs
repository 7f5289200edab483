//! Structure-aware fuzz target for declared lengths, over every supported request type.
//!
//! The input picks an (api, version) from `versions::SUPPORTED` and drives the building of a
//! valid request for it (from the guard's layout table, decoded and encoded again by
//! kafka-protocol, so it is a request as the codec crate writes it). Then some of its declared
//! lengths (the guard reports where each is) are rewritten to hostile or near-miss values and
//! some bytes are changed, and the frame goes through `codec::decode_request`. It checks:
//!
//! - nothing aborts or panics;
//! - no single allocation during the decode is larger than a bound tied to the frame size
//!   (a counting global allocator records the largest);
//! - the guard never refuses a frame kafka-protocol alone decodes.
//!
//! Run: `scripts/fuzz.sh` (all targets) or `cd fuzz && cargo +nightly fuzz run request_lengths`.
#![no_main]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use bytes::{Bytes, BytesMut};
use libfuzzer_sys::fuzz_target;
use sluice_protocol::codec::{self, DecodeError};
use sluice_protocol::guard::{self, sample, sample::Source};
use sluice_protocol::kafka_protocol::messages::{ApiKey, RequestHeader, RequestKind};
use sluice_protocol::kafka_protocol::protocol::{Decodable, Encodable};
use sluice_protocol::versions::SUPPORTED;

/// A frame the guard refuses may cost one allocation of at most this many times its size plus
/// the error message...
const REFUSED_FRAME_MULTIPLE: usize = 2;
const ERROR_MESSAGE_BYTES_MAX: usize = 512;
/// ...and one it accepts at most this many times its size plus a constant: the codec's structs
/// are larger than their smallest encoding (a 2-byte topic entry is ~100 bytes in memory).
const ACCEPTED_FRAME_MULTIPLE: usize = 64;
const ACCEPTED_FRAME_BYTES_EXTRA: usize = 4096;
/// Element counts up to this may be handed to kafka-protocol alone (a few MB at most).
const SAFE_FOR_CODEC: u64 = 1 << 16;

struct PeakTracking;

static TRACKING: AtomicBool = AtomicBool::new(false);
static PEAK: AtomicUsize = AtomicUsize::new(0);

fn note(size: usize) {
    if TRACKING.load(Ordering::Relaxed) {
        PEAK.fetch_max(size, Ordering::Relaxed);
    }
}

// SAFETY: every call is passed on unchanged to the system allocator; the bookkeeping touches
// only atomics.
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
        // SAFETY: as for `alloc`; `ptr` and `layout` come from `System`.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` and `layout` come from `System`.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: PeakTracking = PeakTracking;

fn largest_allocation<T>(f: impl FnOnce() -> T) -> (T, usize) {
    PEAK.store(0, Ordering::Relaxed);
    TRACKING.store(true, Ordering::Relaxed);
    let out = f();
    TRACKING.store(false, Ordering::Relaxed);
    (out, PEAK.load(Ordering::Relaxed))
}

fn pairs() -> Vec<(ApiKey, i16)> {
    SUPPORTED
        .iter()
        .flat_map(|&(api, min, max)| (min..=max).map(move |v| (api, v)))
        .collect()
}

/// kafka-protocol alone: header and body.
fn codec_alone(frame: &[u8], api: ApiKey, version: i16) -> Option<(RequestHeader, RequestKind)> {
    let mut buf = Bytes::copy_from_slice(frame);
    let header = RequestHeader::decode(&mut buf, api.request_header_version(version)).ok()?;
    // Through the codec layer, which adds the versions kafka-protocol lacks (share_v2).
    let body = codec::decode_request_body(api, &mut buf, version).ok()?;
    Some((header, body))
}

/// Choices from the input, little-endian u32 at a time where wide values are wanted.
fn wide(src: &mut sample::Bytes<'_>) -> u32 {
    (0..4).fold(0u32, |acc, _| (acc << 8) | src.below(256))
}

fuzz_target!(|data: &[u8]| {
    let pairs = pairs();
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    let (api, version) = pairs[usize::from(pick) % pairs.len()];
    let mut src = sample::Bytes(rest);

    // A valid request, as kafka-protocol writes it.
    let built =
        sample::request(api, version, 1, &mut src).expect("every supported api has a layout");
    let (header, body) = codec_alone(&built, api, version).unwrap_or_else(|| {
        panic!("{api:?} v{version}: kafka-protocol refuses a frame built from the layout table")
    });
    let mut out = BytesMut::new();
    header
        .encode(&mut out, api.request_header_version(version))
        .expect("encode header");
    codec::encode_request_body(&mut out, &body, version).expect("encode body");
    let mut frame = out.to_vec();

    // Rewrite some declared lengths.
    for _ in 0..src.below(4) {
        let Ok(fields) = guard::length_fields(&frame, api, version) else {
            break;
        };
        if fields.is_empty() {
            break;
        }
        let field = &fields[src.below(fields.len() as u32) as usize];
        let left = (frame.len() - field.offset - field.width) as i64;
        let value = match src.below(10) {
            0 => 0x7fff_ffff,
            1 => 0xffff_ffff,
            2 => -1,
            3 => -2,
            4 => left,
            5 => left + 1,
            6 => field.raw + 1,
            7 => field.raw - 1,
            8 => i64::from(src.below(256)),
            _ => i64::from(wide(&mut src)),
        };
        frame = sample::rewrite(&frame, field, value);
    }
    // And some bytes after the fixed header prefix.
    for _ in 0..src.below(4) {
        if frame.len() > 8 {
            let at = 8 + src.below((frame.len() - 8) as u32) as usize;
            frame[at] = src.below(256) as u8;
        }
    }

    let len = frame.len();
    let bytes = Bytes::from(frame.clone());
    let (result, peak) = largest_allocation(|| codec::decode_request(bytes));
    let bound = match &result {
        Err(DecodeError::Malformed { reason, .. })
            if guard::check(&frame, api, version).is_err() =>
        {
            // Refused by the guard: kafka-protocol alone must fail on it too (run it only when
            // that cannot reserve a huge array).
            if guard::largest_count_reserved(&frame, api, version) <= SAFE_FOR_CODEC {
                if let Some((_, body)) = codec_alone(&frame, api, version) {
                    panic!("guard refused a frame kafka-protocol decodes: {reason}\n{body:?}");
                }
            }
            REFUSED_FRAME_MULTIPLE * len + ERROR_MESSAGE_BYTES_MAX
        }
        _ => ACCEPTED_FRAME_MULTIPLE * len + ACCEPTED_FRAME_BYTES_EXTRA,
    };
    assert!(
        peak <= bound,
        "{api:?} v{version}: largest allocation {peak} bytes decoding a {len}-byte frame (bound {bound})"
    );
});
