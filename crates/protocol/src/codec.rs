//! Request decoding and response encoding.
//!
//! Decoding is three steps: the fixed prefix of every request header (api key, api version,
//! correlation id) is read first, so an unknown API or unsupported version is answered or
//! refused with the client's correlation id before any body parsing; then [`guard::check`]
//! checks every length the frame declares against the bytes that remain (a frame cannot make
//! the decoder reserve memory it does not carry); then the header and body are decoded with
//! `kafka-protocol`. Record batches inside Produce requests stay `Bytes` slices
//! of the frame: never copied, never re-encoded.
//!
//! Bodies go through [`decode_request_body`] and [`encode_response_body`] (and their client-side
//! twins), which hand ShareFetch and ShareAcknowledge to [`share_v2`]: it adds their v2, which
//! `kafka-protocol` does not know, on top of its v1.

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{
    ApiKey, RequestHeader, RequestKind, ResponseHeader, ResponseKind, ShareAcknowledgeRequest,
    ShareAcknowledgeResponse, ShareFetchRequest, ShareFetchResponse,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

use crate::{guard, share_v2, versions};

/// A decoded request.
///
/// ShareFetch and ShareAcknowledge v2 come as their v1 structs (with `api_version` 2); the fields
/// v2 adds are read with the traits of [`share_v2`] (e.g. `share_acquire_mode()`,
/// `is_renew_ack()`), and are at their defaults for v1.
#[derive(Debug)]
pub struct Request {
    pub api_key: ApiKey,
    pub api_version: i16,
    pub correlation_id: i32,
    pub client_id: Option<StrBytes>,
    pub body: RequestKind,
}

/// Why a request could not be decoded.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    #[error("request is {len} bytes, too short for a request header")]
    TooShort { len: usize },
    #[error("unknown API key {api_key} (correlation id {correlation_id})")]
    UnknownApi { api_key: i16, correlation_id: i32 },
    #[error("{api_key:?} version {api_version} is not supported (correlation id {correlation_id})")]
    UnsupportedVersion {
        api_key: ApiKey,
        api_version: i16,
        correlation_id: i32,
    },
    #[error(
        "malformed {api_key:?} v{api_version} request (correlation id {correlation_id}): {reason}"
    )]
    Malformed {
        api_key: ApiKey,
        api_version: i16,
        correlation_id: i32,
        reason: String,
    },
}

impl DecodeError {
    /// The correlation id, when the header got that far.
    pub fn correlation_id(&self) -> Option<i32> {
        match self {
            DecodeError::TooShort { .. } => None,
            DecodeError::UnknownApi { correlation_id, .. }
            | DecodeError::UnsupportedVersion { correlation_id, .. }
            | DecodeError::Malformed { correlation_id, .. } => Some(*correlation_id),
        }
    }
}

/// Decodes one request frame (without its 4-byte size prefix).
pub fn decode_request(mut frame: Bytes) -> Result<Request, DecodeError> {
    if frame.len() < 8 {
        return Err(DecodeError::TooShort { len: frame.len() });
    }
    let raw_key = i16::from_be_bytes([frame[0], frame[1]]);
    let api_version = i16::from_be_bytes([frame[2], frame[3]]);
    let correlation_id = i32::from_be_bytes([frame[4], frame[5], frame[6], frame[7]]);
    // The codec's error for an unknown key is `()`: the key itself is all there is to keep.
    let api_key = ApiKey::try_from(raw_key).map_err(|()| DecodeError::UnknownApi {
        api_key: raw_key,
        correlation_id,
    })?;
    if !versions::is_supported(api_key, api_version) {
        return Err(DecodeError::UnsupportedVersion {
            api_key,
            api_version,
            correlation_id,
        });
    }
    let malformed = |reason: String| DecodeError::Malformed {
        api_key,
        api_version,
        correlation_id,
        reason,
    };
    // Every declared length is checked before kafka-protocol sees the frame: its decoders
    // reserve what an array declares before reading an element (see `guard`).
    guard::check(&frame, api_key, api_version).map_err(|e| malformed(e.to_string()))?;
    let header = RequestHeader::decode(&mut frame, api_key.request_header_version(api_version))
        .map_err(|e| malformed(format!("header: {e}")))?;
    let body = decode_request_body(api_key, &mut frame, api_version)
        .map_err(|e| malformed(format!("body: {e}")))?;
    Ok(Request {
        api_key,
        api_version,
        correlation_id,
        client_id: header.client_id,
        body,
    })
}

/// Decodes a request body of `api_key` at `api_version`, leaving `buf` after it: `kafka-protocol`,
/// and [`share_v2`] for ShareFetch and ShareAcknowledge. No length checks: run [`guard::check`]
/// on the frame first.
pub fn decode_request_body(
    api_key: ApiKey,
    buf: &mut Bytes,
    api_version: i16,
) -> Result<RequestKind, String> {
    match api_key {
        ApiKey::ShareFetch => {
            share_v2::decode::<ShareFetchRequest>(buf, api_version).map(RequestKind::ShareFetch)
        }
        ApiKey::ShareAcknowledge => share_v2::decode::<ShareAcknowledgeRequest>(buf, api_version)
            .map(RequestKind::ShareAcknowledge),
        _ => RequestKind::decode(api_key, buf, api_version).map_err(|e| e.to_string()),
    }
}

/// Appends a request body at `api_version` to `out` (the counterpart of
/// [`decode_request_body`]). On error `out` may hold part of it.
pub fn encode_request_body(
    out: &mut BytesMut,
    body: &RequestKind,
    api_version: i16,
) -> Result<(), String> {
    match body {
        RequestKind::ShareFetch(request) => share_v2::encode(out, request, api_version),
        RequestKind::ShareAcknowledge(request) => share_v2::encode(out, request, api_version),
        _ => body.encode(out, api_version).map_err(|e| e.to_string()),
    }
}

/// Appends a response body at `api_version` to `out`: `kafka-protocol`, and [`share_v2`] for
/// ShareFetch and ShareAcknowledge. On error `out` may hold part of it.
pub fn encode_response_body(
    out: &mut BytesMut,
    body: &ResponseKind,
    api_version: i16,
) -> Result<(), String> {
    match body {
        ResponseKind::ShareFetch(response) => share_v2::encode(out, response, api_version),
        ResponseKind::ShareAcknowledge(response) => share_v2::encode(out, response, api_version),
        _ => body.encode(out, api_version).map_err(|e| e.to_string()),
    }
}

/// Decodes a response body of `api_key` at `api_version` (the counterpart of
/// [`encode_response_body`]), leaving `buf` after it.
pub fn decode_response_body(
    api_key: ApiKey,
    buf: &mut Bytes,
    api_version: i16,
) -> Result<ResponseKind, String> {
    match api_key {
        ApiKey::ShareFetch => {
            share_v2::decode::<ShareFetchResponse>(buf, api_version).map(ResponseKind::ShareFetch)
        }
        ApiKey::ShareAcknowledge => share_v2::decode::<ShareAcknowledgeResponse>(buf, api_version)
            .map(ResponseKind::ShareAcknowledge),
        _ => ResponseKind::decode(api_key, buf, api_version).map_err(|e| e.to_string()),
    }
}

/// Why a response could not be encoded (a broker bug: a field the version cannot carry).
#[derive(Debug, thiserror::Error)]
#[error("cannot encode {api_key:?} v{api_version} response: {reason}")]
pub struct EncodeError {
    pub api_key: ApiKey,
    pub api_version: i16,
    pub reason: String,
}

/// Appends one whole response frame (size prefix, header, body) to `out`.
pub fn encode_response(
    out: &mut BytesMut,
    api_key: ApiKey,
    api_version: i16,
    correlation_id: i32,
    body: &ResponseKind,
) -> Result<(), EncodeError> {
    let header = ResponseHeader::default().with_correlation_id(correlation_id);
    write_frame(out, api_key, api_version, |out| {
        header
            .encode(out, api_key.response_header_version(api_version))
            .map_err(|e| e.to_string())
            .and_then(|()| encode_response_body(out, body, api_version))
    })
}

/// Appends one whole request frame to `out` (client side: the CLI and tests).
pub fn encode_request(
    out: &mut BytesMut,
    api_key: ApiKey,
    api_version: i16,
    correlation_id: i32,
    client_id: &str,
    body: &RequestKind,
) -> Result<(), EncodeError> {
    let header = RequestHeader::default()
        .with_request_api_key(api_key as i16)
        .with_request_api_version(api_version)
        .with_correlation_id(correlation_id)
        .with_client_id(Some(StrBytes::from_string(client_id.to_owned())));
    write_frame(out, api_key, api_version, |out| {
        header
            .encode(out, api_key.request_header_version(api_version))
            .map_err(|e| e.to_string())
            .and_then(|()| encode_request_body(out, body, api_version))
    })
}

/// Appends a size prefix, whatever `encode` writes, then patches the size in. On error nothing
/// is left appended.
fn write_frame<E: std::fmt::Display>(
    out: &mut BytesMut,
    api_key: ApiKey,
    api_version: i16,
    encode: impl FnOnce(&mut BytesMut) -> Result<(), E>,
) -> Result<(), EncodeError> {
    let start = out.len();
    out.put_i32(0); // size, patched below
    if let Err(e) = encode(out) {
        out.truncate(start);
        return Err(EncodeError {
            api_key,
            api_version,
            reason: e.to_string(),
        });
    }
    let size = (out.len() - start - 4) as i32;
    out[start..start + 4].copy_from_slice(&size.to_be_bytes());
    Ok(())
}

/// Decodes one response frame (without its size prefix): `(correlation id, body)`.
pub fn decode_response(
    mut frame: Bytes,
    api_key: ApiKey,
    api_version: i16,
) -> Result<(i32, ResponseKind), String> {
    let header = ResponseHeader::decode(&mut frame, api_key.response_header_version(api_version))
        .map_err(|e| format!("response header: {e}"))?;
    let body = decode_response_body(api_key, &mut frame, api_version)
        .map_err(|e| format!("{api_key:?} v{api_version} response: {e}"))?;
    Ok((header.correlation_id, body))
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::{ApiVersionsRequest, MetadataRequest};

    fn frame_body(buf: &BytesMut) -> Bytes {
        Bytes::copy_from_slice(&buf[4..])
    }

    #[test]
    fn request_round_trip_and_version_checks() {
        let mut buf = BytesMut::new();
        let body = RequestKind::Metadata(MetadataRequest::default());
        encode_request(&mut buf, ApiKey::Metadata, 9, 77, "test", &body).unwrap();
        let req = decode_request(frame_body(&buf)).unwrap();
        assert_eq!(
            (req.api_key, req.api_version, req.correlation_id),
            (ApiKey::Metadata, 9, 77)
        );
        assert_eq!(req.client_id.as_deref(), Some("test"));

        let mut buf = BytesMut::new();
        encode_request(&mut buf, ApiKey::Metadata, 0, 5, "t", &body).unwrap();
        assert!(matches!(
            decode_request(frame_body(&buf)),
            Err(DecodeError::UnsupportedVersion {
                correlation_id: 5,
                api_version: 0,
                ..
            })
        ));

        let mut raw = vec![0x7f, 0x7f, 0, 0, 0, 0, 0, 9, 0, 0];
        assert!(matches!(
            decode_request(Bytes::from(raw.clone())),
            Err(DecodeError::UnknownApi {
                api_key: 0x7f7f,
                correlation_id: 9
            })
        ));
        raw.truncate(5);
        assert!(matches!(
            decode_request(Bytes::from(raw)),
            Err(DecodeError::TooShort { len: 5 })
        ));
    }

    /// The frame that made the broker abort: Metadata v1 declaring 2^31 - 1 topics.
    #[test]
    fn a_declared_length_the_frame_does_not_carry_is_malformed() {
        let frame =
            Bytes::from_static(b"\x00\x03\x00\x01\x00\x00\x00\x07\x00\x05probe\x7f\xff\xff\xff");
        match decode_request(frame) {
            Err(DecodeError::Malformed {
                api_key: ApiKey::Metadata,
                api_version: 1,
                correlation_id: 7,
                reason,
            }) => assert!(
                reason.starts_with("topics: declares 2147483647 elements, 0 bytes left"),
                "{reason}"
            ),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn truncated_bodies_are_malformed_not_panics() {
        let mut buf = BytesMut::new();
        let body = RequestKind::ApiVersions(
            ApiVersionsRequest::default()
                .with_client_software_name(StrBytes::from_static_str("x"))
                .with_client_software_version(StrBytes::from_static_str("1")),
        );
        encode_request(&mut buf, ApiKey::ApiVersions, 3, 1, "c", &body).unwrap();
        let whole = frame_body(&buf);
        for cut in 8..whole.len() {
            let _ = decode_request(whole.slice(..cut));
        }
    }
}
