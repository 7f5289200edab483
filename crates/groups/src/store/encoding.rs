//! The file format's frames and records (see the module doc's table): encoding, and decoding
//! in two steps (an allocation-free "is a whole frame here?" check, then the parse).

use std::borrow::Cow;
use std::io;

use super::{CommittedOffset, FORMAT_VERSION, FRAME_HEADER_BYTES, GroupRecord, WRITE_BYTES_MAX};

/// A record as stored: decoupled from [`GroupRecord`] so renaming the public type cannot
/// silently change the file format. Borrows when encoding, owns when decoding.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(super) enum StoredRecord<'a> {
    Offset {
        group: Cow<'a, str>,
        topic: Cow<'a, str>,
        partition: i32,
        offset: Option<Cow<'a, CommittedOffset>>,
    },
    Group {
        group: Cow<'a, str>,
        snapshot: Option<Cow<'a, serde_json::Value>>,
    },
}

impl<'a> StoredRecord<'a> {
    pub(super) fn borrowed(record: &'a GroupRecord) -> StoredRecord<'a> {
        match record {
            GroupRecord::Offset {
                group,
                topic,
                partition,
                offset,
            } => StoredRecord::Offset {
                group: Cow::Borrowed(group),
                topic: Cow::Borrowed(topic),
                partition: *partition,
                offset: offset.as_ref().map(Cow::Borrowed),
            },
            GroupRecord::Group { group, snapshot } => StoredRecord::Group {
                group: Cow::Borrowed(group),
                snapshot: snapshot.as_ref().map(Cow::Borrowed),
            },
        }
    }

    fn into_record(self) -> GroupRecord {
        match self {
            StoredRecord::Offset {
                group,
                topic,
                partition,
                offset,
            } => GroupRecord::Offset {
                group: group.into_owned(),
                topic: topic.into_owned(),
                partition,
                offset: offset.map(Cow::into_owned),
            },
            StoredRecord::Group { group, snapshot } => GroupRecord::Group {
                group: group.into_owned(),
                snapshot: snapshot.map(Cow::into_owned),
            },
        }
    }
}

/// Appends one frame holding `records` to `out`; on error `out` is left as it was.
pub(super) fn encode_frame(out: &mut Vec<u8>, records: &[StoredRecord<'_>]) -> io::Result<()> {
    let start = out.len();
    out.extend_from_slice(&[0; FRAME_HEADER_BYTES]);
    out.push(FORMAT_VERSION);
    if let Err(e) = serde_json::to_writer(&mut *out, records) {
        out.truncate(start);
        return Err(io::Error::new(io::ErrorKind::InvalidInput, e));
    }
    let payload_bytes = out.len() - start - FRAME_HEADER_BYTES;
    if payload_bytes > WRITE_BYTES_MAX {
        out.truncate(start);
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("records encode to {payload_bytes} bytes, more than {WRITE_BYTES_MAX}"),
        ));
    }
    let crc = crc32c::crc32c(&out[start + FRAME_HEADER_BYTES..]);
    out[start..start + 4].copy_from_slice(&(payload_bytes as u32).to_be_bytes());
    out[start + 4..start + 8].copy_from_slice(&crc.to_be_bytes());
    Ok(())
}

/// Why replay stopped before the end of the file (rows of the recovery table).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Damage {
    TornHeader,
    ZeroLength,
    LengthTooLarge,
    TornPayload,
    CrcMismatch,
    Undecodable,
}

impl Damage {
    pub(super) fn describe(self) -> &'static str {
        match self {
            Damage::TornHeader => "torn frame header",
            Damage::ZeroLength => "zero length (zero-filled tail)",
            Damage::LengthTooLarge => "frame length over the limit",
            Damage::TornPayload => "frame runs past the end of the file",
            Damage::CrcMismatch => "CRC mismatch",
            Damage::Undecodable => "payload does not decode",
        }
    }
}

/// What is at the start of `buf`: the cheap, allocation-free step of decoding.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Frame<'a> {
    End,
    /// A whole frame whose CRC matches; `frame_bytes` includes the header.
    Whole {
        payload: &'a [u8],
        frame_bytes: usize,
    },
    Damaged(Damage),
}

pub(super) fn check_frame(buf: &[u8]) -> Frame<'_> {
    if buf.is_empty() {
        return Frame::End;
    }
    let Some((header, rest)) = buf.split_first_chunk::<FRAME_HEADER_BYTES>() else {
        return Frame::Damaged(Damage::TornHeader);
    };
    let payload_bytes = u32::from_be_bytes([header[0], header[1], header[2], header[3]]) as usize;
    let crc = u32::from_be_bytes([header[4], header[5], header[6], header[7]]);
    if payload_bytes == 0 {
        return Frame::Damaged(Damage::ZeroLength);
    }
    if payload_bytes > WRITE_BYTES_MAX {
        return Frame::Damaged(Damage::LengthTooLarge);
    }
    let Some(payload) = rest.get(..payload_bytes) else {
        return Frame::Damaged(Damage::TornPayload);
    };
    if crc32c::crc32c(payload) != crc {
        return Frame::Damaged(Damage::CrcMismatch);
    }
    Frame::Whole {
        payload,
        frame_bytes: FRAME_HEADER_BYTES + payload_bytes,
    }
}

#[derive(Debug)]
pub(super) enum DecodeError {
    /// Written by a newer format: not damage, so never truncated.
    NewerVersion(u8),
    Malformed(String),
}

/// The second step of decoding: a CRC-checked payload into records.
pub(super) fn decode_payload(payload: &[u8]) -> Result<Vec<GroupRecord>, DecodeError> {
    let Some((&version, json)) = payload.split_first() else {
        return Err(DecodeError::Malformed("empty payload".into()));
    };
    if version > FORMAT_VERSION {
        return Err(DecodeError::NewerVersion(version));
    }
    if version != FORMAT_VERSION {
        return Err(DecodeError::Malformed(format!("format version {version}")));
    }
    let records: Vec<StoredRecord<'static>> =
        serde_json::from_slice(json).map_err(|e| DecodeError::Malformed(e.to_string()))?;
    Ok(records.into_iter().map(StoredRecord::into_record).collect())
}
