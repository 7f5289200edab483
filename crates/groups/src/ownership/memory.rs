//! [`MemoryStore`]: a group store shared by several coordinators of one process, in memory,
//! with the same contract as the PostgreSQL one (`sluice-cluster`'s `GroupOwner`): leases
//! with epochs, fenced writes applied in call order, renewals that report the groups taken
//! over. For tests of cluster mode (two coordinators, or two brokers, in one process) and
//! simulations; nothing is durable, and time only passes when a test says so
//! ([`MemoryStore::expire`], [`MemoryOwner::renew`]).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use futures::FutureExt;
use futures::future::BoxFuture;

use super::{GroupOwnership, OwnerEpoch, Take, TakenGroup, Written};
use crate::errors::SharedStoreError;
use crate::store::{CommittedOffset, GroupRecord, StoreError};

/// One group's lease.
#[derive(Debug, Clone, Copy)]
struct Lease {
    broker_id: i32,
    epoch: i64,
    live: bool,
}

#[derive(Debug, Default)]
struct State {
    leases: HashMap<String, Lease>,
    snapshots: BTreeMap<String, serde_json::Value>,
    offsets: BTreeMap<String, BTreeMap<(String, i32), CommittedOffset>>,
    /// Every call fails as an unreachable database would.
    down: bool,
}

impl State {
    fn holds(&self, broker_id: i32, group_id: &str, epoch: OwnerEpoch) -> bool {
        self.leases
            .get(group_id)
            .is_some_and(|l| l.live && l.broker_id == broker_id && l.epoch == epoch.0)
    }

    fn apply(&mut self, record: GroupRecord) {
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
                }
            }
            GroupRecord::Group {
                group,
                snapshot: Some(snapshot),
            } => {
                self.snapshots.insert(group, snapshot);
            }
            GroupRecord::Group {
                group,
                snapshot: None,
            } => {
                self.snapshots.remove(&group);
                self.offsets.remove(&group);
            }
        }
    }
}

/// The shared store: leases, snapshots and committed offsets of every group.
#[derive(Debug, Default)]
pub struct MemoryStore {
    state: Mutex<State>,
}

impl MemoryStore {
    pub fn new() -> Arc<MemoryStore> {
        Arc::new(MemoryStore::default())
    }

    /// A test that panicked while holding the lock leaves plain data behind: still usable.
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Broker `broker_id`'s view of the store: the ownership its coordinator gets.
    pub fn owner(self: &Arc<Self>, broker_id: i32) -> Arc<MemoryOwner> {
        Arc::new(MemoryOwner {
            broker_id,
            store: Arc::clone(self),
            held: Mutex::default(),
            lost: Mutex::default(),
            takes: AtomicUsize::new(0),
        })
    }

    /// The broker holding a live lease on `group_id`, if one does.
    pub fn holder(&self, group_id: &str) -> Option<i32> {
        let st = self.lock();
        st.leases
            .get(group_id)
            .filter(|l| l.live)
            .map(|l| l.broker_id)
    }

    /// The group's lease runs out (its holder stopped renewing): the next take wins it.
    pub fn expire(&self, group_id: &str) {
        if let Some(lease) = self.lock().leases.get_mut(group_id) {
            lease.live = false;
        }
    }

    /// While `down`, every take and write fails as an unreachable database would.
    pub fn set_down(&self, down: bool) {
        self.lock().down = down;
    }

    /// The committed offset stored for `group_id` on `topic`-`partition`.
    pub fn committed(&self, group_id: &str, topic: &str, partition: i32) -> Option<i64> {
        let st = self.lock();
        st.offsets
            .get(group_id)
            .and_then(|o| o.get(&(topic.to_owned(), partition)))
            .map(|o| o.offset)
    }

    /// Whether any lease is live.
    pub fn any_live_lease(&self) -> bool {
        self.lock().leases.values().any(|l| l.live)
    }
}

fn unavailable() -> StoreError {
    StoreError::Unavailable("the in-memory group store is down".into())
}

/// One broker's [`GroupOwnership`] over a [`MemoryStore`].
#[derive(Debug)]
pub struct MemoryOwner {
    broker_id: i32,
    store: Arc<MemoryStore>,
    held: Mutex<HashMap<String, OwnerEpoch>>,
    lost: Mutex<Vec<(String, OwnerEpoch)>>,
    takes: AtomicUsize,
}

impl MemoryOwner {
    /// What a renewal finds: every held group whose lease is no longer this broker's (taken
    /// over, or expired) is lost.
    pub fn renew(&self) {
        let st = self.store.lock();
        let mut held = lock(&self.held);
        let gone: Vec<(String, OwnerEpoch)> = held
            .iter()
            .filter(|(g, e)| !st.holds(self.broker_id, g, **e))
            .map(|(g, e)| (g.clone(), *e))
            .collect();
        for (g, e) in gone {
            held.remove(&g);
            lock(&self.lost).push((g, e));
        }
    }

    /// The groups this broker holds, sorted.
    pub fn held(&self) -> Vec<String> {
        let mut held: Vec<String> = lock(&self.held).keys().cloned().collect();
        held.sort();
        held
    }

    /// How many times [`GroupOwnership::take`] was called.
    pub fn takes(&self) -> usize {
        self.takes.load(Ordering::SeqCst)
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl GroupOwnership for MemoryOwner {
    fn take(&self, group_id: &str) -> BoxFuture<'static, Take> {
        self.takes.fetch_add(1, Ordering::SeqCst);
        let mut st = self.store.lock();
        if st.down {
            let e = SharedStoreError::from(unavailable());
            return futures::future::ready(Take::Unavailable(e)).boxed();
        }
        if group_id.contains('\0') {
            let reason = format!("group id {group_id:?} contains a NUL character");
            return futures::future::ready(Take::InvalidGroupId(reason)).boxed();
        }
        let epoch = match st.leases.get(group_id) {
            Some(l) if l.live && l.broker_id != self.broker_id => {
                let broker_id = l.broker_id;
                return futures::future::ready(Take::OwnedElsewhere { broker_id }).boxed();
            }
            Some(l) if l.live => l.epoch,
            Some(l) => l.epoch + 1,
            None => 1,
        };
        st.leases.insert(
            group_id.to_owned(),
            Lease {
                broker_id: self.broker_id,
                epoch,
                live: true,
            },
        );
        lock(&self.held).insert(group_id.to_owned(), OwnerEpoch(epoch));
        let taken = TakenGroup {
            epoch: OwnerEpoch(epoch),
            snapshot: st.snapshots.get(group_id).cloned(),
            offsets: st.offsets.get(group_id).cloned().unwrap_or_default(),
        };
        // Pending once, as a database round trip is: other requests for the group arrive
        // while the take is in flight.
        async move {
            tokio::task::yield_now().await;
            Take::Owned(taken)
        }
        .boxed()
    }

    fn write(
        &self,
        leases: Vec<(String, OwnerEpoch)>,
        records: Vec<GroupRecord>,
    ) -> BoxFuture<'static, Result<Written, StoreError>> {
        // Applied at call time: in call order.
        let mut st = self.store.lock();
        if st.down {
            return futures::future::ready(Err(unavailable())).boxed();
        }
        for record in &records {
            let group = match record {
                GroupRecord::Offset { group, .. } | GroupRecord::Group { group, .. } => group,
            };
            if !leases.iter().any(|(g, _)| g == group) {
                let refused = StoreError::Failed(format!(
                    "a write carried a record for group {group} without its lease"
                ));
                return futures::future::ready(Err(refused)).boxed();
            }
        }
        let mut written = Written::default();
        for (group_id, epoch) in &leases {
            if !st.holds(self.broker_id, group_id, *epoch) {
                written.not_coordinator.push(group_id.clone());
                let mut held = lock(&self.held);
                if held.get(group_id) == Some(epoch) {
                    held.remove(group_id);
                    lock(&self.lost).push((group_id.clone(), *epoch));
                }
            }
        }
        for record in records {
            let group = match &record {
                GroupRecord::Offset { group, .. } | GroupRecord::Group { group, .. } => group,
            };
            if !written.not_coordinator.contains(group) {
                st.apply(record);
            }
        }
        futures::future::ready(Ok(written)).boxed()
    }

    fn release(&self, group_id: &str, epoch: OwnerEpoch) {
        let mut st = self.store.lock();
        if st.holds(self.broker_id, group_id, epoch)
            && let Some(lease) = st.leases.get_mut(group_id)
        {
            lease.live = false;
        }
        lock(&self.held).remove(group_id);
    }

    fn lost(&self) -> Vec<(String, OwnerEpoch)> {
        std::mem::take(&mut *lock(&self.lost))
    }

    fn release_all(&self) -> BoxFuture<'static, Result<(), StoreError>> {
        let mut st = self.store.lock();
        for lease in st.leases.values_mut() {
            if lease.broker_id == self.broker_id {
                lease.live = false;
            }
        }
        lock(&self.held).clear();
        futures::future::ready(Ok(())).boxed()
    }
}
