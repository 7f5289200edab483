//! The memory budget: one pool of bytes that every listener draws from for the data it holds
//! on a client's behalf (request frames from their first byte, fetch responses from when they
//! are read until they are written, HTTP bodies and read responses).
//!
//! Where it sits: the Kafka listener reserves a frame's size as soon as the 4-byte size prefix
//! has arrived, before it reads the rest, and holds the reservation until the response has been
//! written; the Fetch handler reserves what it is about to read; the HTTP API does the same for
//! bodies and reads. When the pool is short, a connection stops reading (TCP back-pressure
//! reaches the client) and a fetch reads less (Kafka allows fewer bytes than asked, as long as
//! at least one batch is returned), so memory never grows past the limit by more than the
//! batches that must be served whole (see [`Reservation::resize`]).
//!
//! Two classes share the pool. [`Class::Bulk`] (Produce, Fetch, HTTP records) may use all but
//! a headroom; [`Class::Control`] (everything else: ApiVersions, Metadata, heartbeats, offset
//! commits) may also use the headroom, so a new client can connect and a group can heartbeat
//! while producers and consumers hold the rest. Waiters are not queued in order: a small
//! request that fits goes ahead of a large one that does not (a FIFO queue would let one large
//! waiter stall every small one behind it).
//!
//! Fairness between clients: one client address may hold at most half the pool, so a client
//! that floods it (fetches it never reads, frames it never finishes) leaves the other half to
//! everyone else until the listener's timeouts close its connections. (Many addresses acting
//! together can still fill the pool; the timeouts then bound how long.)
//!
//! Key types: [`MemoryBudget`] (the pool, cheap to clone), [`Ask`] (class and client of a
//! reservation), [`Reservation`] (bytes held; given back when dropped).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::Notify;

/// Default `memory_limit`: what the whole broker may hold for clients.
pub const MEMORY_LIMIT_DEFAULT: usize = 512 << 20;

/// The share of the pool one client address may hold: 1/`CLIENT_SHARE_DIVISOR`. A single
/// client host still gets half the pool; clients that flood it from one address (unread
/// fetches, half-sent frames) leave the other half to everyone else.
const CLIENT_SHARE_DIVISOR: usize = 2;

/// The share of the pool kept for [`Class::Control`]: 1/`CONTROL_HEADROOM_DIVISOR`.
const CONTROL_HEADROOM_DIVISOR: usize = 16;

/// Which share of the pool a reservation may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// Record data: produce frames, fetch responses, HTTP records. Leaves the headroom free.
    Bulk,
    /// Small requests that keep clients and groups alive; may use the headroom too.
    Control,
}

/// Who asks, and for what: the class decides how much of the pool is open to the ask, the
/// client address how much that client already holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ask {
    pub class: Class,
    /// The client the bytes are held for; `None` for the broker's own work (no share limit).
    pub client: Option<IpAddr>,
}

impl Ask {
    pub fn new(class: Class, client: Option<IpAddr>) -> Ask {
        Ask { class, client }
    }
}

/// The pool. Clones share it.
#[derive(Debug, Clone)]
pub struct MemoryBudget {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    /// Bytes the pool holds in all.
    limit: usize,
    held: Mutex<Held>,
    /// Woken whenever bytes are given back.
    released: Notify,
    /// Times a reservation had to wait or was cut short because the pool was short.
    short: AtomicU64,
    /// Bytes reserved past the limit by forced growth, in all (batches served whole).
    forced_over: AtomicU64,
}

/// What is reserved now: in all (may exceed the limit by forced growth, see
/// [`Reservation::resize`]) and per client address.
#[derive(Debug, Default)]
struct Held {
    total: usize,
    by_client: HashMap<IpAddr, usize>,
}

impl MemoryBudget {
    /// A pool of `limit` bytes.
    pub fn new(limit: usize) -> MemoryBudget {
        MemoryBudget {
            inner: Arc::new(Inner {
                limit,
                held: Mutex::new(Held::default()),
                released: Notify::new(),
                short: AtomicU64::new(0),
                forced_over: AtomicU64::new(0),
            }),
        }
    }

    /// Bytes the pool holds in all.
    pub fn limit(&self) -> usize {
        self.inner.limit
    }

    /// Bytes reserved now.
    pub fn used(&self) -> usize {
        self.inner.held().total
    }

    /// Times a reservation waited or was cut short because the pool was short.
    pub fn short_count(&self) -> u64 {
        self.inner.short.load(Ordering::Relaxed)
    }

    /// Bytes reserved past the limit, in all, to serve a batch whole.
    pub fn forced_over_bytes(&self) -> u64 {
        self.inner.forced_over.load(Ordering::Relaxed)
    }

    /// The most one reservation for `ask` can ever hold (larger asks are clamped to it, so
    /// they wait for room instead of forever).
    pub fn capacity(&self, ask: Ask) -> usize {
        self.inner.capacity(ask)
    }

    /// The most one client address may hold at once.
    pub fn client_share(&self) -> usize {
        self.inner.limit / CLIENT_SHARE_DIVISOR
    }

    /// Reserves `bytes` (clamped to [`MemoryBudget::capacity`]) if the pool has them now.
    pub fn try_reserve(&self, bytes: usize, ask: Ask) -> Option<Reservation> {
        let bytes = bytes.min(self.capacity(ask));
        self.try_reserve_up_to(bytes, bytes, ask)
    }

    /// Reserves `bytes` (clamped to [`MemoryBudget::capacity`]), waiting until the pool has
    /// them. Cancel-safe: dropping the future reserves nothing.
    pub async fn reserve(&self, bytes: usize, ask: Ask) -> Reservation {
        let bytes = bytes.min(self.capacity(ask));
        self.reserve_up_to(bytes, bytes, ask).await
    }

    /// Reserves as much of `want` as the pool has now for `ask`, if that is at least `min`
    /// (both clamped to [`MemoryBudget::capacity`]). For reads that may return less than asked.
    pub fn try_reserve_up_to(&self, min: usize, want: usize, ask: Ask) -> Option<Reservation> {
        let want = want.min(self.capacity(ask));
        let min = min.min(want);
        let mut held = self.inner.held();
        let free = self.inner.free(&held, ask);
        if free < min {
            self.inner.short.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        let bytes = want.min(free);
        if bytes < want {
            self.inner.short.fetch_add(1, Ordering::Relaxed);
        }
        held.add(ask.client, bytes);
        Some(Reservation {
            inner: Arc::clone(&self.inner),
            ask,
            bytes,
        })
    }

    /// [`MemoryBudget::try_reserve_up_to`], waiting for at least `min` bytes to be free.
    /// Waiters are woken whenever bytes come back and are not served in order, so a small ask
    /// that fits goes ahead of a large one that does not. Cancel-safe.
    pub async fn reserve_up_to(&self, min: usize, want: usize, ask: Ask) -> Reservation {
        loop {
            let released = self.inner.released.notified();
            tokio::pin!(released);
            released.as_mut().enable();
            if let Some(r) = self.try_reserve_up_to(min, want, ask) {
                return r;
            }
            released.await;
        }
    }

    /// A reservation of nothing for `ask`, to grow or merge into later.
    pub fn empty(&self, ask: Ask) -> Reservation {
        Reservation {
            inner: Arc::clone(&self.inner),
            ask,
            bytes: 0,
        }
    }
}

impl Inner {
    fn held(&self) -> MutexGuard<'_, Held> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The part of the pool open to `class`.
    fn class_capacity(&self, class: Class) -> usize {
        match class {
            Class::Bulk => self.limit - self.limit / CONTROL_HEADROOM_DIVISOR,
            Class::Control => self.limit,
        }
    }

    fn capacity(&self, ask: Ask) -> usize {
        let class = self.class_capacity(ask.class);
        match ask.client {
            Some(_) => class.min(self.limit / CLIENT_SHARE_DIVISOR),
            None => class,
        }
    }

    /// Bytes `ask` may still take: what its class leaves free, and what its client's share
    /// leaves.
    fn free(&self, held: &Held, ask: Ask) -> usize {
        let free = self.class_capacity(ask.class).saturating_sub(held.total);
        match ask.client {
            Some(client) => {
                let share = self.limit / CLIENT_SHARE_DIVISOR;
                free.min(share.saturating_sub(held.of(client)))
            }
            None => free,
        }
    }

    fn give_back(&self, client: Option<IpAddr>, bytes: usize) {
        if bytes > 0 {
            self.held().remove(client, bytes);
            self.released.notify_waiters();
        }
    }
}

impl Held {
    fn of(&self, client: IpAddr) -> usize {
        self.by_client.get(&client).copied().unwrap_or(0)
    }

    fn add(&mut self, client: Option<IpAddr>, bytes: usize) {
        self.total += bytes;
        if let Some(client) = client {
            *self.by_client.entry(client).or_insert(0) += bytes;
        }
    }

    fn remove(&mut self, client: Option<IpAddr>, bytes: usize) {
        self.total -= bytes;
        if let Some(client) = client
            && let Some(n) = self.by_client.get_mut(&client)
        {
            *n -= bytes;
            if *n == 0 {
                self.by_client.remove(&client);
            }
        }
    }
}

/// Bytes held from the pool for one client; given back when dropped.
#[derive(Debug)]
pub struct Reservation {
    inner: Arc<Inner>,
    /// The class and client the bytes are held for.
    ask: Ask,
    bytes: usize,
}

impl Reservation {
    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Takes `more` bytes if the pool has them now for this reservation's class and client.
    pub fn try_grow(&mut self, more: usize) -> bool {
        self.grow_up_to(more, more) == more
    }

    /// Takes as much of `want` more bytes as the pool has now for this reservation's class and
    /// client, if that is at least `min`; returns the bytes taken (0 when fewer than `min`).
    pub fn grow_up_to(&mut self, min: usize, want: usize) -> usize {
        let mut held = self.inner.held();
        let free = self.inner.free(&held, self.ask);
        if free < min.min(want) {
            self.inner.short.fetch_add(1, Ordering::Relaxed);
            return 0;
        }
        let more = want.min(free);
        if more < want {
            self.inner.short.fetch_add(1, Ordering::Relaxed);
        }
        held.add(self.ask.client, more);
        self.bytes += more;
        more
    }

    /// Makes the reservation exactly `bytes`: gives back what is no longer needed, or takes more
    /// without waiting, past the limit if need be. Growth is for memory already in use that
    /// must be accounted for (a batch larger than the space reserved, which Kafka says must
    /// still be served whole); the excess is counted in
    /// [`MemoryBudget::forced_over_bytes`].
    pub fn resize(&mut self, bytes: usize) {
        if bytes < self.bytes {
            self.inner.give_back(self.ask.client, self.bytes - bytes);
        } else if bytes > self.bytes {
            let more = bytes - self.bytes;
            let mut held = self.inner.held();
            let over = (held.total + more).saturating_sub(self.inner.limit.max(held.total));
            held.add(self.ask.client, more);
            drop(held);
            if over > 0 {
                self.inner
                    .forced_over
                    .fetch_add(over as u64, Ordering::Relaxed);
            }
        }
        self.bytes = bytes;
    }

    /// Takes `other`'s bytes into this reservation (both must be held for the same client).
    pub fn merge(&mut self, mut other: Reservation) {
        debug_assert!(Arc::ptr_eq(&self.inner, &other.inner));
        if other.ask.client == self.ask.client {
            self.bytes += std::mem::take(&mut other.bytes);
        } else {
            // Held for another client: move the bytes over in the books.
            let bytes = std::mem::take(&mut other.bytes);
            let mut held = self.inner.held();
            held.remove(other.ask.client, bytes);
            held.add(self.ask.client, bytes);
            self.bytes += bytes;
        }
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.inner.give_back(self.ask.client, self.bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BULK: Ask = Ask {
        class: Class::Bulk,
        client: None,
    };
    const CONTROL: Ask = Ask {
        class: Class::Control,
        client: None,
    };

    fn client(last: u8) -> Ask {
        Ask::new(Class::Bulk, Some(IpAddr::from([127, 0, 0, last])))
    }

    #[test]
    fn reserve_and_give_back() {
        let pool = MemoryBudget::new(1600);
        assert_eq!(pool.capacity(BULK), 1500);
        let a = pool.try_reserve(1000, BULK).unwrap();
        assert_eq!(pool.used(), 1000);
        // Bulk may not use the control headroom; control may.
        assert!(pool.try_reserve(600, BULK).is_none());
        let c = pool.try_reserve(600, CONTROL).unwrap();
        assert_eq!(pool.used(), 1600);
        drop(a);
        drop(c);
        assert_eq!(pool.used(), 0);
        // Asks over the capacity are clamped, not refused forever.
        let big = pool.try_reserve(10_000, BULK).unwrap();
        assert_eq!(big.bytes(), 1500);
    }

    #[test]
    fn one_client_holds_at_most_its_share() {
        let pool = MemoryBudget::new(1600);
        let a = pool.try_reserve(700, client(2)).unwrap();
        assert!(pool.try_reserve(200, client(2)).is_none());
        let more = pool.try_reserve_up_to(1, 200, client(2)).unwrap();
        assert_eq!(more.bytes(), 100);
        // Another client still finds room.
        let b = pool.try_reserve(700, client(3)).unwrap();
        assert_eq!(pool.capacity(client(4)), 800);
        drop((a, more, b));
        assert_eq!(pool.used(), 0);
        assert!(pool.inner.held().by_client.is_empty());
    }

    #[test]
    fn up_to_takes_what_is_free() {
        let pool = MemoryBudget::new(1600);
        let a = pool.try_reserve(1000, BULK).unwrap();
        let b = pool.try_reserve_up_to(100, 2000, BULK).unwrap();
        assert_eq!(b.bytes(), 500);
        assert!(pool.try_reserve_up_to(1, 10, BULK).is_none());
        assert!(pool.short_count() >= 2);
        drop((a, b));
        assert_eq!(pool.used(), 0);
    }

    #[test]
    fn try_grow_respects_class_and_share() {
        let pool = MemoryBudget::new(1600);
        let mut r = pool.empty(client(2));
        assert!(r.try_grow(500));
        assert!(r.try_grow(300));
        assert!(!r.try_grow(1), "the client's share is 800");
        assert_eq!(r.bytes(), 800);
        r.resize(700);
        assert_eq!(r.grow_up_to(50, 500), 100);
        assert_eq!(r.grow_up_to(1, 500), 0);
        drop(r);
        assert_eq!(pool.used(), 0);
    }

    #[test]
    fn resize_shrinks_forces_growth_and_merge_moves_bytes() {
        let pool = MemoryBudget::new(1000);
        let mut r = pool.try_reserve(500, client(2)).unwrap();
        r.resize(100);
        assert_eq!(pool.used(), 100);
        r.resize(1200);
        assert_eq!(pool.used(), 1200);
        assert_eq!(pool.forced_over_bytes(), 200);
        let mut e = pool.empty(client(3));
        e.merge(r);
        assert_eq!(e.bytes(), 1200);
        assert_eq!(pool.inner.held().of(IpAddr::from([127, 0, 0, 3])), 1200);
        drop(e);
        assert_eq!(pool.used(), 0);
        assert!(pool.inner.held().by_client.is_empty());
    }

    #[tokio::test]
    async fn a_waiter_wakes_when_bytes_come_back_and_small_asks_pass_large_ones() {
        let pool = MemoryBudget::new(1600);
        let held = pool.try_reserve(1400, BULK).unwrap();
        let big = tokio::spawn({
            let pool = pool.clone();
            async move { pool.reserve(1200, BULK).await.bytes() }
        });
        tokio::task::yield_now().await;
        // A small ask fits beside the held bytes even though a large one is waiting.
        let small = pool.try_reserve(100, BULK).unwrap();
        drop(small);
        drop(held);
        assert_eq!(big.await.unwrap(), 1200);
        assert_eq!(pool.used(), 0);
    }
}
