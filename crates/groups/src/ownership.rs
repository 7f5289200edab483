//! # Group ownership: the coordinator over a store that many brokers share
//!
//! In cluster mode many brokers share one group store (PostgreSQL, `sluice-cluster`), and
//! each group has one coordinator at a time: the broker holding the group's *lease*.
//! [`GroupOwnership`] is all the coordinator asks of such a store; the single-broker file
//! store ([`crate::store::GroupStore`]) needs none of it (every group is always its own).
//!
//! Where it sits: a group request for a group this broker does not hold first
//! [`take`](GroupOwnership::take)s it (lease + load), and the coordinator installs what was
//! loaded through the same path recovery uses at open (a classic group's members rejoin; a
//! KIP-848 group resumes from its epochs). Every change is a fenced
//! [`write`](GroupOwnership::write): applied only while the lease taken is still this
//! broker's. A group taken over elsewhere (a renewal found it gone, or a write was refused)
//! shows up in [`lost`](GroupOwnership::lost), and the coordinator drops it from memory, so
//! its members get NOT_COORDINATOR and rejoin at the new coordinator.
//!
//! Key types: [`GroupOwnership`] (the trait), [`OwnerEpoch`] (which takeover a lease is),
//! [`Take`] (what taking a group found), [`TakenGroup`] (its state as loaded), [`Written`]
//! (a fenced write's outcome). [`memory::MemoryStore`] is an in-memory implementation for
//! tests of cluster mode in one process; the PostgreSQL one is `sluice-cluster`'s
//! `GroupOwner`.

use std::collections::BTreeMap;
use std::fmt;

use futures::future::BoxFuture;

use crate::errors::SharedStoreError;
use crate::store::{CommittedOffset, GroupRecord, StoreError};

/// Which takeover of a group a lease is: it rises by one each time another broker (or a new
/// process) takes the group, and every write names it, so a write of an earlier holder is
/// refused. `OwnerEpoch(0)` is the file store's: one broker, never taken over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct OwnerEpoch(pub i64);

impl fmt::Display for OwnerEpoch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// A group's durable state as the new coordinator loaded it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TakenGroup {
    /// The lease taken: every write for the group names it.
    pub epoch: OwnerEpoch,
    /// The group state machine's snapshot (`{"type": .., "snapshot": ..}`), if it has one.
    pub snapshot: Option<serde_json::Value>,
    /// Committed offsets by (topic, partition).
    pub offsets: BTreeMap<(String, i32), CommittedOffset>,
}

/// What [`GroupOwnership::take`] found.
#[derive(Debug, Clone)]
pub enum Take {
    /// This broker holds the group's lease now; serve it from this state.
    Owned(TakenGroup),
    /// Another live broker holds the lease: answer NOT_COORDINATOR (the client asks
    /// FindCoordinator again).
    OwnedElsewhere { broker_id: i32 },
    /// The store did not answer (or this broker may not hold leases right now): answer
    /// COORDINATOR_NOT_AVAILABLE, which clients retry.
    Unavailable(SharedStoreError),
    /// The store cannot hold this group id at all (PostgreSQL text cannot hold U+0000): the
    /// reason, for an INVALID_GROUP_ID answer.
    InvalidGroupId(String),
}

/// What a fenced [`GroupOwnership::write`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Written {
    /// Groups whose records were not written because this broker no longer holds their
    /// lease at the epoch given. Every other group's records were written.
    pub not_coordinator: Vec<String>,
}

/// A store many brokers share, with one owner per group (see the module doc).
///
/// Object safe: the coordinator holds it as `Arc<dyn GroupOwnership>`. Every future is
/// `'static`: it holds what it needs, not the caller's borrows.
pub trait GroupOwnership: Send + Sync + fmt::Debug {
    /// Takes `group_id`: acquires its lease (or renews it, if this broker already holds it)
    /// and loads its state, as of after every write this broker queued before the call.
    ///
    /// On [`Take::Owned`] every write of an earlier holder is either in the state loaded or
    /// refused, and the group is this broker's until [`lost`](Self::lost) names it.
    fn take(&self, group_id: &str) -> BoxFuture<'static, Take>;

    /// Writes `records` for the groups of `leases` (each named with the epoch it was taken
    /// at; every record's group is among them), fenced per group.
    ///
    /// The write is queued in call order when this returns, before the future is polled:
    /// two writes are applied in the order they were called (the coordinator calls this
    /// while its state lock orders its changes). The future resolves once the store has
    /// applied it: `Ok` means durable for every group not in [`Written::not_coordinator`];
    /// those groups had nothing written and are also reported by [`lost`](Self::lost).
    /// `Err(StoreError::Unavailable)`: nothing or all of it was applied (an answer lost
    /// after the commit); the coordinator answers with a retriable error.
    fn write(
        &self,
        leases: Vec<(String, OwnerEpoch)>,
        records: Vec<GroupRecord>,
    ) -> BoxFuture<'static, Result<Written, StoreError>>;

    /// Ends this broker's lease on `group_id` taken at `epoch` (a group it no longer keeps),
    /// after every write queued before. Not awaited: a lease that is not ended runs out.
    fn release(&self, group_id: &str, epoch: OwnerEpoch);

    /// The groups lost since the last call, each with the epoch it was held at: taken over
    /// by another broker, its lease ran out, or a write for it was refused. Each loss is
    /// reported once. The coordinator drops each from memory if it still holds it at that
    /// epoch.
    fn lost(&self) -> Vec<(String, OwnerEpoch)>;

    /// Ends every lease of this broker (clean shutdown) after every write queued before, so
    /// other brokers take the groups over at once instead of a lease later.
    fn release_all(&self) -> BoxFuture<'static, Result<(), StoreError>>;
}

pub mod memory;
#[cfg(test)]
mod tests;
