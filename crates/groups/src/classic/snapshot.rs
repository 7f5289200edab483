//! What survives a restart: [`ClassicGroup::snapshot`], [`ClassicGroup::restore`] (with its
//! decision table) and the stored JSON layout with its hex encoding of bytes.

use std::collections::BTreeSet;

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use super::{ClassicConfig, ClassicGroup, ClassicSnapshot, ClassicState, Member, SNAPSHOT_VERSION};

impl ClassicGroup {
    /// The group as it is now (see [`ClassicGroup::restore`] for how each state comes back).
    /// Pending member ids and timers are not saved: clients recover from losing them.
    pub fn snapshot(&self) -> ClassicSnapshot {
        let saved = SavedGroup {
            version: SNAPSHOT_VERSION,
            state: self.state,
            generation_id: self.generation_id,
            protocol_type: self.protocol_type.clone(),
            protocol_name: self.protocol_name.clone(),
            leader_id: self.leader_id.clone(),
            members: self
                .members
                .iter()
                .map(|m| SavedMember {
                    member_id: m.member_id.clone(),
                    group_instance_id: m.group_instance_id.clone(),
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    session_timeout_ms: m.session_timeout_ms,
                    rebalance_timeout_ms: m.rebalance_timeout_ms,
                    protocols: m
                        .protocols
                        .iter()
                        .map(|(name, metadata)| SavedProtocol {
                            name: name.clone(),
                            metadata: metadata.clone(),
                        })
                        .collect(),
                    assignment: m.assignment.clone(),
                })
                .collect(),
        };
        ClassicSnapshot {
            state: serde_json::to_value(&saved).expect("a classic group serialises to JSON"),
        }
    }

    /// Rebuilds a group from [`ClassicGroup::snapshot`] after a restart, at `now`:
    ///
    /// | saved state | members | comes back as |
    /// |---|---|---|
    /// | `Dead` | any | error: a dead group is not stored |
    /// | any other | none | `Empty`, generation and protocol type kept |
    /// | `Stable` | at most `members_max`, protocol chosen and supported by all | `Stable`, assignments kept, every session starting at `now` |
    /// | `Stable` | otherwise | `PreparingRebalance` (below) |
    /// | `Empty`, `PreparingRebalance`, `CompletingRebalance` | some | `PreparingRebalance` at `now`: members kept without assignments, none counted as rejoined, join phase ending at `now` + rebalance timeout |
    ///
    /// Parked requests died with the old process; their clients retry, and heartbeats or syncs
    /// of a rebalancing group answer REBALANCE_IN_PROGRESS so that members rejoin. Kafka gets
    /// the same outcome by storing its group only when `Stable` or `Empty`.
    pub fn restore(
        group_id: String,
        config: ClassicConfig,
        snapshot: ClassicSnapshot,
        now: i64,
    ) -> Result<ClassicGroup, String> {
        let saved: SavedGroup = serde_json::from_value(snapshot.state)
            .map_err(|e| format!("classic group {group_id}: unreadable snapshot: {e}"))?;
        if saved.version != SNAPSHOT_VERSION {
            return Err(format!(
                "classic group {group_id}: snapshot version {} (expected {SNAPSHOT_VERSION})",
                saved.version
            ));
        }
        if saved.state == ClassicState::Dead {
            return Err(format!(
                "classic group {group_id}: snapshot of a dead group"
            ));
        }
        let mut member_ids = BTreeSet::new();
        let mut instance_ids = BTreeSet::new();
        for m in &saved.members {
            if m.member_id.is_empty() || !member_ids.insert(m.member_id.as_str()) {
                return Err(format!(
                    "classic group {group_id}: empty or repeated member id {:?}",
                    m.member_id
                ));
            }
            if let Some(instance) = &m.group_instance_id
                && !instance_ids.insert(instance.as_str())
            {
                return Err(format!(
                    "classic group {group_id}: repeated group instance id {instance:?}"
                ));
            }
        }
        if !saved.members.is_empty() && saved.protocol_type.is_none() {
            return Err(format!(
                "classic group {group_id}: members but no protocol type"
            ));
        }

        let mut group = ClassicGroup::new(group_id, config);
        group.generation_id = saved.generation_id;
        group.protocol_type = saved.protocol_type;
        if saved.members.is_empty() {
            return Ok(group);
        }
        group.members = saved
            .members
            .into_iter()
            .map(|m| Member {
                member_id: m.member_id,
                group_instance_id: m.group_instance_id,
                client_id: m.client_id,
                client_host: m.client_host,
                protocols: m
                    .protocols
                    .into_iter()
                    .map(|p| (p.name, p.metadata))
                    .collect(),
                session_timeout_ms: m.session_timeout_ms,
                rebalance_timeout_ms: m.rebalance_timeout_ms,
                assignment: m.assignment,
                awaiting_join: false,
                awaiting_sync: false,
                is_new: false,
                pending_sync: false,
                session_deadline: now.saturating_add(i64::from(m.session_timeout_ms)),
            })
            .collect();
        group.leader_id = match saved.leader_id {
            Some(leader) if group.index(&leader).is_some() => Some(leader),
            _ => Some(group.members[0].member_id.clone()),
        };
        group.protocol_name = saved.protocol_name;
        let stable_as_saved = saved.state == ClassicState::Stable
            && group.members.len() <= group.config.members_max
            && group
                .protocol_name
                .as_deref()
                .is_some_and(|p| group.members.iter().all(|m| m.supports(p)));
        if stable_as_saved {
            group.state = ClassicState::Stable;
        } else {
            for m in &mut group.members {
                m.assignment = Bytes::new();
            }
            group.state = ClassicState::PreparingRebalance;
            group.join_deadline = Some(now.saturating_add(group.rebalance_timeout_ms()));
        }
        Ok(group)
    }
}

/// [`ClassicSnapshot::state`], version [`SNAPSHOT_VERSION`].
#[derive(Debug, Serialize, Deserialize)]
struct SavedGroup {
    version: u32,
    state: ClassicState,
    generation_id: i32,
    protocol_type: Option<String>,
    protocol_name: Option<String>,
    leader_id: Option<String>,
    members: Vec<SavedMember>,
}

#[derive(Debug, Serialize, Deserialize)]
struct SavedMember {
    member_id: String,
    group_instance_id: Option<String>,
    client_id: String,
    client_host: String,
    session_timeout_ms: i32,
    rebalance_timeout_ms: i32,
    protocols: Vec<SavedProtocol>,
    #[serde(with = "hex_bytes")]
    assignment: Bytes,
}

#[derive(Debug, Serialize, Deserialize)]
pub(super) struct SavedProtocol {
    pub(super) name: String,
    #[serde(with = "hex_bytes")]
    pub(super) metadata: Bytes,
}

/// Bytes as a lowercase hex string: half the size of a JSON array of numbers, still readable.
mod hex_bytes {
    use bytes::Bytes;
    use serde::{Deserialize, Deserializer, Serializer, de::Error as _};

    const DIGITS: &[u8; 16] = b"0123456789abcdef";

    pub fn serialize<S: Serializer>(bytes: &Bytes, serializer: S) -> Result<S::Ok, S::Error> {
        let mut hex = String::with_capacity(bytes.len() * 2);
        for b in bytes.iter() {
            hex.push(char::from(DIGITS[usize::from(b >> 4)]));
            hex.push(char::from(DIGITS[usize::from(b & 0x0f)]));
        }
        serializer.serialize_str(&hex)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Bytes, D::Error> {
        let hex = String::deserialize(deserializer)?;
        if hex.len() % 2 != 0 {
            return Err(D::Error::custom("hex string of odd length"));
        }
        let digit = |c: u8| match c {
            b'0'..=b'9' => Ok(c - b'0'),
            b'a'..=b'f' => Ok(c - b'a' + 10),
            b'A'..=b'F' => Ok(c - b'A' + 10),
            _ => Err(D::Error::custom("not a hex digit")),
        };
        let mut out = Vec::with_capacity(hex.len() / 2);
        for pair in hex.as_bytes().chunks_exact(2) {
            out.push((digit(pair[0])? << 4) | digit(pair[1])?);
        }
        Ok(Bytes::from(out))
    }
}
