//! ShareFetch v2 and ShareAcknowledge v2 (Kafka 4.2: KIP-1206 share acquire modes, KIP-1222
//! renew acknowledgements), which `kafka-protocol` 0.18 (Kafka 4.1 schemas, v1 only) can neither
//! read nor write.
//!
//! What v2 adds, from Kafka's message specs (`"validVersions": "1-2"`, as released in Kafka 4.2
//! and unchanged in 4.3 and 4.4), checked against the bytes Kafka 4.3.1's own writer produces
//! (`tests.rs`):
//!
//! | message                    | v2 adds                                            | after               |
//! |----------------------------|----------------------------------------------------|---------------------|
//! | `ShareFetchRequest`        | `ShareAcquireMode` int8, then `IsRenewAck` bool    | `BatchSize`         |
//! | `ShareAcknowledgeRequest`  | `IsRenewAck` bool                                  | `ShareSessionEpoch` |
//! | `ShareFetchResponse`       | nothing: v2 is v1 byte for byte                    |                     |
//! | `ShareAcknowledgeResponse` | `AcquisitionLockTimeoutMs` int32                   | `ErrorMessage`      |
//!
//! All of them are plain top-level fields (no tagged field is added, and no nested struct changes;
//! acknowledge type 4, Renew, is a new value of the existing `AcknowledgeTypes` `[]int8`), so a v2
//! message is its v1 encoding with a few fixed-size bytes at one place among the top-level fields,
//! behind fields whose size is read from the frame (compact strings and fixed-size numbers). This
//! layer moves those bytes in and out and leaves everything else to `kafka-protocol` at v1: a v2
//! body is decoded by cutting the added bytes out and decoding the rest as v1; a v2 body is encoded
//! as v1 with the added bytes put in.
//!
//! `ShareAcquireMode` is 0 (batch_optimized) or 1 (record_limit). An early draft of the spec also
//! listed 255 for "renew"; the released spec carries renewing in `IsRenewAck` instead, and Kafka's
//! broker refuses every other id. The layer carries whatever id came, so the broker can answer
//! INVALID_REQUEST ([`ShareFetchRequestExt::share_acquire_mode`]) instead of the connection being
//! closed as for a malformed frame.
//!
//! ## Where the v2 fields are kept
//!
//! The broker works with `kafka-protocol`'s v1 structs, whose only open-ended place is
//! `unknown_tagged_fields`. The bytes v2 adds are kept there, exactly as they are on the wire (a
//! bool normalised to 0 or 1), under the key [`CARRIED_TAG`]; values at their defaults (all zero:
//! mode batch_optimized, no renew, lock timeout 0) are not stored at all. So a v2 message whose new
//! fields are at their defaults decodes to the very struct its v1 form decodes to, and a v1 request
//! reads as the defaults, which is what Kafka makes of a v1 request. The key never reaches the
//! wire: encoding at any version takes it out first, and decoding drops the one wire tag that would
//! land on it (2^31, which no Kafka message defines). Read and set the fields with the extension
//! traits, never through the map: [`ShareFetchRequestExt`], [`ShareAcknowledgeRequestExt`],
//! [`ShareAcknowledgeResponseExt`].

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::fmt;

use bytes::{Buf, Bytes, BytesMut};
use kafka_protocol::messages::{
    ShareAcknowledgeRequest, ShareAcknowledgeResponse, ShareFetchRequest, ShareFetchResponse,
};
use kafka_protocol::protocol::{Decodable, Encodable};

/// The version this layer adds to ShareFetch and ShareAcknowledge (the codec knows up to 1).
pub const VERSION: i16 = 2;

/// The `unknown_tagged_fields` key under which the bytes v2 adds are kept. A wire tag is an
/// unsigned varint that `kafka-protocol` casts to `i32`; only tag 2^31 lands here, and decoding
/// drops it.
pub const CARRIED_TAG: i32 = i32::MIN;

/// How a v2 request fetches (KIP-1206).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ShareAcquireMode {
    /// 0: acquire whole batches; `max_records` is a soft limit (the only mode of v1).
    BatchOptimized,
    /// 1: acquire at most `max_records` records, splitting a batch if need be.
    RecordLimit,
}

impl ShareAcquireMode {
    /// The id on the wire.
    pub const fn id(self) -> i8 {
        match self {
            ShareAcquireMode::BatchOptimized => 0,
            ShareAcquireMode::RecordLimit => 1,
        }
    }

    /// The mode with wire id `id`, if Kafka defines one.
    pub const fn from_id(id: i8) -> Option<Self> {
        match id {
            0 => Some(ShareAcquireMode::BatchOptimized),
            1 => Some(ShareAcquireMode::RecordLimit),
            _ => None,
        }
    }
}

/// A `ShareAcquireMode` id Kafka does not define: the request is answered with INVALID_REQUEST.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InvalidShareAcquireMode(pub i8);

impl fmt::Display for InvalidShareAcquireMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unknown share acquire mode {} (0 is batch_optimized, 1 is record_limit)",
            self.0
        )
    }
}

impl std::error::Error for InvalidShareAcquireMode {}

/// The fields ShareFetch v2 adds, on a `ShareFetchRequest` (as decoded, or to be encoded).
pub trait ShareFetchRequestExt: Sized {
    /// `ShareAcquireMode` as the client sent it; 0 (batch_optimized) for a v1 request.
    fn share_acquire_mode_id(&self) -> i8;
    /// The acquire mode, or the id Kafka does not define (answer INVALID_REQUEST).
    fn share_acquire_mode(&self) -> Result<ShareAcquireMode, InvalidShareAcquireMode> {
        let id = self.share_acquire_mode_id();
        ShareAcquireMode::from_id(id).ok_or(InvalidShareAcquireMode(id))
    }
    /// `IsRenewAck`: the acknowledgement batches carry Renew (type 4) acknowledgements; false for
    /// a v1 request.
    fn is_renew_ack(&self) -> bool;
    /// Sets `ShareAcquireMode` (written only at v2).
    fn with_share_acquire_mode(self, mode: ShareAcquireMode) -> Self {
        self.with_share_acquire_mode_id(mode.id())
    }
    /// Sets `ShareAcquireMode` to any id, defined or not (written only at v2).
    fn with_share_acquire_mode_id(self, id: i8) -> Self;
    /// Sets `IsRenewAck` (written only at v2).
    fn with_is_renew_ack(self, renew: bool) -> Self;
}

/// The field ShareAcknowledge v2 adds, on a `ShareAcknowledgeRequest`.
pub trait ShareAcknowledgeRequestExt: Sized {
    /// `IsRenewAck`: the acknowledgement batches carry Renew (type 4) acknowledgements; false for
    /// a v1 request.
    fn is_renew_ack(&self) -> bool;
    /// Sets `IsRenewAck` (written only at v2).
    fn with_is_renew_ack(self, renew: bool) -> Self;
}

/// The field ShareAcknowledge v2 adds to its response.
pub trait ShareAcknowledgeResponseExt: Sized {
    /// `AcquisitionLockTimeoutMs`: how long the records stay acquired (renewed ones included);
    /// 0 when not set, which Kafka's client reads as "unknown".
    fn acquisition_lock_timeout_ms(&self) -> i32;
    /// Sets `AcquisitionLockTimeoutMs` (written only at v2; a v1 response has no such field).
    fn set_acquisition_lock_timeout_ms(&mut self, ms: i32);
    /// Sets `AcquisitionLockTimeoutMs` (written only at v2; a v1 response has no such field).
    fn with_acquisition_lock_timeout_ms(mut self, ms: i32) -> Self {
        self.set_acquisition_lock_timeout_ms(ms);
        self
    }
}

impl ShareFetchRequestExt for ShareFetchRequest {
    fn share_acquire_mode_id(&self) -> i8 {
        added::<Self>(&self.unknown_tagged_fields)[0] as i8
    }

    fn is_renew_ack(&self) -> bool {
        added::<Self>(&self.unknown_tagged_fields)[1] != 0
    }

    fn with_share_acquire_mode_id(mut self, id: i8) -> Self {
        let mut bytes = added::<Self>(&self.unknown_tagged_fields);
        bytes[0] = id as u8;
        carry::<Self>(&mut self.unknown_tagged_fields, &bytes);
        self
    }

    fn with_is_renew_ack(mut self, renew: bool) -> Self {
        let mut bytes = added::<Self>(&self.unknown_tagged_fields);
        bytes[1] = u8::from(renew);
        carry::<Self>(&mut self.unknown_tagged_fields, &bytes);
        self
    }
}

impl ShareAcknowledgeRequestExt for ShareAcknowledgeRequest {
    fn is_renew_ack(&self) -> bool {
        added::<Self>(&self.unknown_tagged_fields)[0] != 0
    }

    fn with_is_renew_ack(mut self, renew: bool) -> Self {
        carry::<Self>(&mut self.unknown_tagged_fields, &[u8::from(renew)]);
        self
    }
}

impl ShareAcknowledgeResponseExt for ShareAcknowledgeResponse {
    fn acquisition_lock_timeout_ms(&self) -> i32 {
        let bytes = added::<Self>(&self.unknown_tagged_fields);
        i32::from_be_bytes(bytes[..4].try_into().expect("4 bytes"))
    }

    fn set_acquisition_lock_timeout_ms(&mut self, ms: i32) {
        carry::<Self>(&mut self.unknown_tagged_fields, &ms.to_be_bytes());
    }
}

/// What precedes the place v2 inserts its fields at, among the top-level fields.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Before {
    /// Fixed-size fields taking this many bytes.
    Fixed(usize),
    /// A compact (nullable) string: unsigned varint length + 1 (0 for null), then the bytes.
    CompactString,
}

/// A message this layer adds version 2 of.
pub(crate) trait Versioned: Clone + Encodable + Decodable {
    /// The message's name in Kafka's specs, for error messages.
    const NAME: &'static str;
    /// The top-level fields before the added ones.
    const BEFORE: &'static [Before];
    /// How many bytes v2 adds (its fields, on the wire, in spec order).
    const ADDED: usize;
    /// Offsets of the bools among the added bytes (normalised to 0 or 1, as `kafka-protocol`
    /// normalises every bool it decodes).
    const BOOLS: &'static [usize];
    /// Offsets of the added bytes of fields that are not `ignorable` in the spec: set to
    /// anything but their default, they cannot be written below v2 (as in Kafka's writer, which
    /// throws). Ignorable ones are left out of a v1 message.
    const NOT_IGNORABLE: &'static [usize];
    fn tags(&self) -> &BTreeMap<i32, Bytes>;
    fn tags_mut(&mut self) -> &mut BTreeMap<i32, Bytes>;
}

impl Versioned for ShareFetchRequest {
    const NAME: &'static str = "ShareFetchRequest";
    // group_id, member_id, then share_session_epoch, max_wait_ms, min_bytes, max_bytes,
    // max_records, batch_size (int32 each).
    const BEFORE: &'static [Before] = &[
        Before::CompactString,
        Before::CompactString,
        Before::Fixed(6 * 4),
    ];
    // share_acquire_mode (int8), is_renew_ack (bool).
    const ADDED: usize = 2;
    const BOOLS: &'static [usize] = &[1];
    // ShareAcquireMode is ignorable; IsRenewAck is not.
    const NOT_IGNORABLE: &'static [usize] = &[1];
    fn tags(&self) -> &BTreeMap<i32, Bytes> {
        &self.unknown_tagged_fields
    }
    fn tags_mut(&mut self) -> &mut BTreeMap<i32, Bytes> {
        &mut self.unknown_tagged_fields
    }
}

impl Versioned for ShareAcknowledgeRequest {
    const NAME: &'static str = "ShareAcknowledgeRequest";
    // group_id, member_id, then share_session_epoch (int32).
    const BEFORE: &'static [Before] = &[
        Before::CompactString,
        Before::CompactString,
        Before::Fixed(4),
    ];
    // is_renew_ack (bool).
    const ADDED: usize = 1;
    const BOOLS: &'static [usize] = &[0];
    const NOT_IGNORABLE: &'static [usize] = &[0];
    fn tags(&self) -> &BTreeMap<i32, Bytes> {
        &self.unknown_tagged_fields
    }
    fn tags_mut(&mut self) -> &mut BTreeMap<i32, Bytes> {
        &mut self.unknown_tagged_fields
    }
}

impl Versioned for ShareFetchResponse {
    const NAME: &'static str = "ShareFetchResponse";
    const BEFORE: &'static [Before] = &[];
    // v2 is v1 on the wire.
    const ADDED: usize = 0;
    const BOOLS: &'static [usize] = &[];
    const NOT_IGNORABLE: &'static [usize] = &[];
    fn tags(&self) -> &BTreeMap<i32, Bytes> {
        &self.unknown_tagged_fields
    }
    fn tags_mut(&mut self) -> &mut BTreeMap<i32, Bytes> {
        &mut self.unknown_tagged_fields
    }
}

impl Versioned for ShareAcknowledgeResponse {
    const NAME: &'static str = "ShareAcknowledgeResponse";
    // throttle_time_ms (int32), error_code (int16), then error_message.
    const BEFORE: &'static [Before] = &[Before::Fixed(4 + 2), Before::CompactString];
    // acquisition_lock_timeout_ms (int32).
    const ADDED: usize = 4;
    const BOOLS: &'static [usize] = &[];
    // Ignorable: a v1 response goes without it.
    const NOT_IGNORABLE: &'static [usize] = &[];
    fn tags(&self) -> &BTreeMap<i32, Bytes> {
        &self.unknown_tagged_fields
    }
    fn tags_mut(&mut self) -> &mut BTreeMap<i32, Bytes> {
        &mut self.unknown_tagged_fields
    }
}

/// The added bytes kept on a message: the carried ones, or zeros (every field's default).
/// At least 4 bytes, so callers can index the fields of any message.
fn added<T: Versioned>(tags: &BTreeMap<i32, Bytes>) -> [u8; 4] {
    let mut out = [0u8; 4];
    if let Some(carried) = tags.get(&CARRIED_TAG).filter(|c| c.len() == T::ADDED) {
        out[..T::ADDED].copy_from_slice(carried);
    }
    out
}

/// Keeps `bytes` (the first `T::ADDED` of them) on a message, or nothing when all are zero.
fn carry<T: Versioned>(tags: &mut BTreeMap<i32, Bytes>, bytes: &[u8]) {
    let bytes = &bytes[..T::ADDED];
    if bytes.iter().all(|&b| b == 0) {
        tags.remove(&CARRIED_TAG);
    } else {
        tags.insert(CARRIED_TAG, Bytes::copy_from_slice(bytes));
    }
}

/// Decodes a `T` body at `version` from `buf`, leaving `buf` after what was read.
pub(crate) fn decode<T: Versioned>(buf: &mut Bytes, version: i16) -> Result<T, String> {
    let fail = |e: &dyn fmt::Display| format!("cannot decode {} v{version}: {e}", T::NAME);
    let (mut message, added) = match version {
        VERSION if T::ADDED > 0 => decode_v2(buf).map_err(|e| fail(&e))?,
        VERSION => (T::decode(buf, 1).map_err(|e| fail(&e))?, [0; 4]),
        _ => (T::decode(buf, version).map_err(|e| fail(&e))?, [0; 4]),
    };
    // A wire tag 2^31 is dropped before the v2 fields are kept: it is nothing Kafka defines,
    // and its key is ours.
    message.tags_mut().remove(&CARRIED_TAG);
    carry::<T>(message.tags_mut(), &added);
    Ok(message)
}

/// Decodes a v2 body whose added bytes are not at their place in v1: the message decoded as v1
/// without them, and them (bools normalised).
fn decode_v2<T: Versioned>(buf: &mut Bytes) -> Result<(T, [u8; 4]), String> {
    let at = added_at::<T>(buf)?;
    let Some(wire) = buf.get(at..at + T::ADDED) else {
        return Err(format!(
            "the frame ends inside the fields v2 adds ({} bytes at {at}, {} left)",
            T::ADDED,
            buf.len() - at
        ));
    };
    let mut added = [0u8; 4];
    added[..T::ADDED].copy_from_slice(wire);
    for &i in T::BOOLS {
        added[i] = u8::from(added[i] != 0);
    }
    // The v1 form: the same bytes without the added ones. A copy, which is cheap: requests are
    // small, and the one message that carries records (ShareFetchResponse) needs no cutting.
    let mut v1 = BytesMut::with_capacity(buf.len() - T::ADDED);
    v1.extend_from_slice(&buf[..at]);
    v1.extend_from_slice(&buf[at + T::ADDED..]);
    let mut v1 = v1.freeze();
    let whole = v1.len();
    let message = T::decode(&mut v1, 1).map_err(|e| e.to_string())?;
    // The decoder read past `at` (there are fields after the added ones), so what it consumed
    // spans the added bytes too.
    buf.advance(whole - v1.len() + T::ADDED);
    Ok((message, added))
}

/// Appends a `T` body at `version` to `out`. On error `out` may hold part of it (callers
/// truncate).
pub(crate) fn encode<T: Versioned>(
    out: &mut BytesMut,
    message: &T,
    version: i16,
) -> Result<(), String> {
    let fail = |e: &dyn fmt::Display| format!("cannot encode {} v{version}: {e}", T::NAME);
    let bytes = added::<T>(message.tags());
    // The carried bytes are not a tag: encode a copy without them (only when there are some).
    let stripped;
    let message = if message.tags().contains_key(&CARRIED_TAG) {
        let mut copy = message.clone();
        copy.tags_mut().remove(&CARRIED_TAG);
        stripped = copy;
        &stripped
    } else {
        message
    };
    if version != VERSION {
        if T::NOT_IGNORABLE.iter().any(|&i| bytes[i] != 0) {
            return Err(fail(&"a field v2 adds is set, and v1 cannot carry it"));
        }
        return message.encode(out, version).map_err(|e| fail(&e));
    }
    let start = out.len();
    message.encode(out, 1).map_err(|e| fail(&e))?;
    if T::ADDED > 0 {
        let at = start + added_at::<T>(&out[start..]).map_err(|e| fail(&e))?;
        insert(out, at, &bytes[..T::ADDED]);
    }
    Ok(())
}

/// Where the added fields go in `body` (a v1 or v2 body of `T`): the offset just after the
/// fields of `T::BEFORE`.
fn added_at<T: Versioned>(body: &[u8]) -> Result<usize, String> {
    let mut at = 0usize;
    for part in T::BEFORE {
        let size = match part {
            Before::Fixed(n) => *n,
            Before::CompactString => {
                let (n, width) = uvarint(&body[at..])?;
                // 0 is null; otherwise n - 1 bytes follow.
                width + n.saturating_sub(1) as usize
            }
        };
        at = at.saturating_add(size);
        if at > body.len() {
            return Err(format!(
                "the frame ends inside the fields before the ones v2 adds ({at} bytes needed, {} \
                 there)",
                body.len()
            ));
        }
    }
    Ok(at)
}

/// An unsigned varint as `kafka-protocol` reads one: at most five bytes, ending at the first
/// byte without its high bit. Returns the value and the bytes it took.
fn uvarint(buf: &[u8]) -> Result<(u32, usize), String> {
    let mut value = 0u32;
    for i in 0..5 {
        let &b = buf.get(i).ok_or("the frame ends inside a string length")?;
        value |= u32::from(b & 0x7f) << (7 * i);
        if b < 0x80 {
            return Ok((value, i + 1));
        }
    }
    Ok((value, 5))
}

/// Inserts `bytes` into `out` at `at`.
fn insert(out: &mut BytesMut, at: usize, bytes: &[u8]) {
    let end = out.len();
    out.extend_from_slice(bytes);
    out.copy_within(at..end, at + bytes.len());
    out[at..at + bytes.len()].copy_from_slice(bytes);
}
