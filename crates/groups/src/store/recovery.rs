//! The live state the file holds and the replay that rebuilds it at open, stopping at the
//! first damaged frame (the recovery table in the module doc).

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::io;
use std::path::Path;

use super::encoding::{
    Damage, DecodeError, Frame, StoredRecord, check_frame, decode_payload, encode_frame,
};
use super::{CommittedOffset, FORMAT_VERSION, GroupRecord, StoreError};

/// The state the file holds: what applying its records in order gives.
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct Live {
    pub(super) offsets: BTreeMap<String, BTreeMap<(String, i32), CommittedOffset>>,
    pub(super) groups: BTreeMap<String, serde_json::Value>,
}

impl Live {
    pub(super) fn apply(&mut self, record: GroupRecord) {
        match record {
            GroupRecord::Offset {
                group,
                topic,
                partition,
                offset: Some(offset),
            } => {
                self.offsets
                    .entry(group)
                    .or_default()
                    .insert((topic, partition), offset);
            }
            GroupRecord::Offset {
                group,
                topic,
                partition,
                offset: None,
            } => {
                if let Some(offsets) = self.offsets.get_mut(&group) {
                    offsets.remove(&(topic, partition));
                    if offsets.is_empty() {
                        self.offsets.remove(&group);
                    }
                }
            }
            GroupRecord::Group {
                group,
                snapshot: Some(snapshot),
            } => {
                self.groups.insert(group, snapshot);
            }
            GroupRecord::Group {
                group,
                snapshot: None,
            } => {
                self.groups.remove(&group);
                self.offsets.remove(&group);
            }
        }
    }

    /// Appends the live state to `out` as one record per frame: each group's snapshot, then
    /// every committed offset.
    pub(super) fn encode(&self, out: &mut Vec<u8>) -> io::Result<()> {
        for (group, snapshot) in &self.groups {
            let record = StoredRecord::Group {
                group: Cow::Borrowed(group),
                snapshot: Some(Cow::Borrowed(snapshot)),
            };
            encode_frame(out, &[record])?;
        }
        for (group, offsets) in &self.offsets {
            for ((topic, partition), offset) in offsets {
                let record = StoredRecord::Offset {
                    group: Cow::Borrowed(group),
                    topic: Cow::Borrowed(topic),
                    partition: *partition,
                    offset: Some(Cow::Borrowed(offset)),
                };
                encode_frame(out, &[record])?;
            }
        }
        Ok(())
    }
}

#[derive(Debug)]
pub(super) struct Replayed {
    pub(super) live: Live,
    /// Bytes of whole, applied frames from the start of the file.
    pub(super) valid_bytes: usize,
    /// Why replay stopped before the end of the file, if it did.
    pub(super) damage: Option<Damage>,
}

/// Applies every frame of `buf` in order, stopping at the first damaged one (see the recovery
/// table in the module doc).
pub(super) fn replay(buf: &[u8], path: &Path) -> Result<Replayed, StoreError> {
    let mut live = Live::default();
    let mut position = 0;
    let damage = loop {
        match check_frame(&buf[position..]) {
            Frame::End => break None,
            Frame::Damaged(damage) => break Some(damage),
            Frame::Whole {
                payload,
                frame_bytes,
            } => match decode_payload(payload) {
                Ok(records) => {
                    records.into_iter().for_each(|r| live.apply(r));
                    position += frame_bytes;
                }
                Err(DecodeError::NewerVersion(version)) => {
                    return Err(StoreError::Io {
                        op: "replay",
                        path: path.to_path_buf(),
                        source: io::Error::new(
                            io::ErrorKind::InvalidData,
                            format!(
                                "frame at byte {position} has format version {version}; this \
                                 build reads version {FORMAT_VERSION} (written by a newer Sluice?)"
                            ),
                        ),
                    });
                }
                Err(DecodeError::Malformed(reason)) => {
                    tracing::warn!(
                        path = %path.display(),
                        position,
                        %reason,
                        "group store frame passes its CRC but does not decode"
                    );
                    break Some(Damage::Undecodable);
                }
            },
        }
    };
    Ok(Replayed {
        live,
        valid_bytes: position,
        damage,
    })
}
