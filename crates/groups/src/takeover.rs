//! Cluster mode, the coordinator's side of [`GroupOwnership`]: taking a group over
//! ([`Coordinator::own_group`]) and installing what was loaded, checking a group is still
//! this broker's before serving it from memory, dropping the groups lost to other brokers,
//! releasing leases kept for groups without state, and the [`Backend`] every write goes
//! through (the group file with one broker, the shared store in cluster mode).

use std::sync::Arc;

use futures::FutureExt;
use futures::future::BoxFuture;

use crate::{
    Coordinator, GroupError, GroupOwnership, GroupRecord, GroupStore, Held, Inner, OwnerEpoch,
    StoreError, Take, TakenGroup, Written, restored_group,
};

/// Where the coordinator's durable state lives.
#[derive(Debug)]
pub(crate) enum Backend {
    /// One broker: the group file; every group is always this broker's.
    File(GroupStore),
    /// Cluster mode: a store many brokers share, one owner per group.
    Shared(Arc<dyn GroupOwnership>),
}

impl Backend {
    /// Queues `records` for the groups of `leases`, in call order; resolves once durable
    /// (see [`GroupStore::write`] and [`GroupOwnership::write`]).
    pub(crate) fn write(
        &self,
        leases: Vec<(String, OwnerEpoch)>,
        records: Vec<GroupRecord>,
    ) -> BoxFuture<'static, Result<Written, StoreError>> {
        match self {
            Backend::File(store) => {
                let pending = store.write(records);
                async move { pending.await.map(|()| Written::default()) }.boxed()
            }
            Backend::Shared(owner) => owner.write(leases, records),
        }
    }

    /// [`Backend::write`] of one group's records: a refusal of the group is
    /// [`StoreError::NotCoordinator`].
    pub(crate) fn write_group(
        &self,
        group_id: &str,
        epoch: OwnerEpoch,
        records: Vec<GroupRecord>,
    ) -> BoxFuture<'static, Result<(), StoreError>> {
        let written = self.write(vec![(group_id.to_owned(), epoch)], records);
        let group_id = group_id.to_owned();
        async move {
            if written.await?.not_coordinator.is_empty() {
                Ok(())
            } else {
                Err(StoreError::NotCoordinator { group_id })
            }
        }
        .boxed()
    }

    /// Test-only: the group file has room for `bytes` per round (`None`: room enough).
    #[cfg(test)]
    pub(crate) fn set_room_bytes(&self, bytes: Option<usize>) {
        if let Backend::File(store) = self {
            store.set_room_bytes(bytes);
        }
    }
}

impl Coordinator {
    /// Makes sure this broker coordinates `group_id`, taking it over in cluster mode when it
    /// does not hold it yet (the group's stored state is installed as recovery does at open).
    /// Always `Ok` with the file store. Every request method calls it first; the broker calls
    /// it before the in-memory reads ([`Coordinator::committed`],
    /// [`Coordinator::describe_classic`], [`Coordinator::describe_consumer`]).
    ///
    /// Errors: [`GroupError::NotCoordinator`] (another broker holds the group),
    /// [`GroupError::CoordinatorNotAvailable`] (the shared store did not answer; retriable),
    /// [`GroupError::UnstorableGroupId`], [`GroupError::GroupsMaxReached`].
    pub async fn own_group(&self, group_id: &str) -> Result<(), GroupError> {
        let Backend::Shared(owner) = &self.store else {
            return Ok(());
        };
        let taking = {
            let mut inner = self.lock();
            self.drop_lost(&mut inner);
            if inner.owned.contains_key(group_id) {
                return Ok(());
            }
            match inner.taking.get(group_id) {
                Some(taking) => taking.clone(),
                None => {
                    if inner.owned.len() + inner.taking.len() >= self.config.groups_max {
                        self.release_unused(&mut inner, None);
                    }
                    if inner.owned.len() + inner.taking.len() >= self.config.groups_max {
                        let groups_max = self.config.groups_max;
                        tracing::warn!(group = %group_id, groups_max, "refusing to take over a group: the broker's group limit is reached");
                        return Err(GroupError::GroupsMaxReached { groups_max });
                    }
                    let taking = owner.take(group_id).shared();
                    inner.taking.insert(group_id.to_owned(), taking.clone());
                    taking
                }
            }
        };
        let outcome = taking.clone().await;
        let mut inner = self.lock();
        if inner
            .taking
            .get(group_id)
            .is_some_and(|t| t.ptr_eq(&taking))
        {
            inner.taking.remove(group_id);
        }
        match outcome {
            Take::Owned(taken) => {
                self.install(&mut inner, group_id, taken);
                Ok(())
            }
            Take::OwnedElsewhere { broker_id } => Err(GroupError::NotCoordinator {
                group_id: group_id.to_owned(),
                coordinator: Some(broker_id),
            }),
            Take::Unavailable(source) => Err(GroupError::CoordinatorNotAvailable {
                group_id: group_id.to_owned(),
                source,
            }),
            Take::InvalidGroupId(reason) => Err(GroupError::UnstorableGroupId(reason)),
        }
    }

    /// Installs a group just taken (every request that waited for the take gets here; the
    /// first installs it, the others find it held).
    fn install(&self, inner: &mut Inner, group_id: &str, taken: TakenGroup) {
        if let Some(held) = inner.owned.get(group_id)
            && held.epoch >= taken.epoch
        {
            return;
        }
        // A state of an older lease, if one is left, is not the truth any more.
        self.drop_group(inner, group_id);
        let now = self.clock.now_ms();
        let TakenGroup {
            epoch,
            snapshot,
            offsets,
        } = taken;
        let restored = restored_group(group_id, &self.config, snapshot, offsets, epoch, now);
        tracing::info!(
            group = %group_id,
            %epoch,
            stored = restored.is_some(),
            "took over group coordination"
        );
        if let Some(group) = restored {
            inner.groups.insert(group_id.to_owned(), group);
        }
        inner.owned.insert(
            group_id.to_owned(),
            Held {
                epoch,
                taken_ms: now,
            },
        );
    }

    /// Whether this broker may serve `group_id` from memory: always with the file store; in
    /// cluster mode while it holds the group's lease.
    pub(crate) fn check_owned(&self, inner: &mut Inner, group_id: &str) -> Result<(), GroupError> {
        if !self.is_shared() {
            return Ok(());
        }
        self.drop_lost(inner);
        if inner.owned.contains_key(group_id) {
            Ok(())
        } else {
            Err(GroupError::NotCoordinator {
                group_id: group_id.to_owned(),
                coordinator: None,
            })
        }
    }

    /// The epoch to write `group_id`'s records with: its lease's in cluster mode, if held.
    pub(crate) fn lease_of(&self, inner: &Inner, group_id: &str) -> Option<OwnerEpoch> {
        match self.store {
            Backend::File(_) => Some(OwnerEpoch::default()),
            Backend::Shared(_) => inner.owned.get(group_id).map(|h| h.epoch),
        }
    }

    /// Drops every group [`GroupOwnership::lost`] reports at the epoch this broker holds it.
    pub(crate) fn drop_lost(&self, inner: &mut Inner) {
        let Backend::Shared(owner) = &self.store else {
            return;
        };
        for (group_id, epoch) in owner.lost() {
            if inner.owned.get(&group_id).is_some_and(|h| h.epoch == epoch) {
                tracing::info!(group = %group_id, %epoch, "group coordination moved to another broker; dropping the group");
                self.drop_group(inner, &group_id);
            }
        }
    }

    /// [`Coordinator::drop_lost`] under the lock (after a write was refused).
    pub(crate) fn drop_lost_now(&self) {
        if self.is_shared() {
            let mut inner = self.lock();
            self.drop_lost(&mut inner);
        }
    }

    /// Forgets `group_id` (cluster mode): its state, its lease, and answers its parked
    /// requests NOT_COORDINATOR so their members look for the new coordinator.
    pub(crate) fn drop_group(&self, inner: &mut Inner, group_id: &str) {
        inner.owned.remove(group_id);
        if let Some(mut group) = inner.groups.remove(group_id) {
            group.refuse_parked(&GroupError::NotCoordinator {
                group_id: group_id.to_owned(),
                coordinator: None,
            });
        }
    }

    /// Releases the leases held for groups without state (cluster mode), taken at least
    /// `older_than_ms` ago (`None`: any age, when the group limit is reached).
    pub(crate) fn release_unused(&self, inner: &mut Inner, older_than_ms: Option<i64>) {
        let Backend::Shared(owner) = &self.store else {
            return;
        };
        let now = self.clock.now_ms();
        let unused: Vec<(String, OwnerEpoch)> = inner
            .owned
            .iter()
            .filter(|(id, held)| {
                !inner.groups.contains_key(*id)
                    && older_than_ms.is_none_or(|age| now - held.taken_ms >= age)
            })
            .map(|(id, held)| (id.clone(), held.epoch))
            .collect();
        for (group_id, epoch) in unused {
            inner.owned.remove(&group_id);
            owner.release(&group_id, epoch);
        }
    }

    /// Cluster mode, clean shutdown: drops every group from memory (their parked requests
    /// are answered NOT_COORDINATOR), then ends every lease after the writes queued before, so
    /// other brokers take the groups over at once. Resolves when the leases are released
    /// (`Ok` at once with the file store, which [`Coordinator::close`] closes).
    pub fn release_all(&self) -> BoxFuture<'static, Result<(), StoreError>> {
        let Backend::Shared(owner) = &self.store else {
            return futures::future::ready(Ok(())).boxed();
        };
        let mut inner = self.lock();
        let held: Vec<String> = inner.owned.keys().cloned().collect();
        for group_id in held {
            self.drop_group(&mut inner, &group_id);
        }
        inner.taking.clear();
        owner.release_all()
    }
}
