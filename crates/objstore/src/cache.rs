//! # Read caches: where the bytes of a run come from
//!
//! A fetch in object-storage mode needs byte ranges of flush objects (one partition's run is
//! one range of one object). [`ReadCache`] serves them from the first of three places that
//! has them:
//!
//! 1. the **recent-objects cache** in memory: whole objects this broker just wrote
//!    ([`ReadCache::insert_object`]), so tail reads cost no GET. A range of one is a zero-copy
//!    [`Bytes::slice`]. Bounded by [`CacheSettings::memory_bytes`]; the entry inserted first
//!    goes first (objects are inserted in sequence order, so the newest are kept);
//! 2. the **range cache** on local disk (`--cache-bytes`, [`CacheSettings::disk_bytes`]): one
//!    file per range loaded from the bucket, least recently used out first;
//! 3. a **ranged GET** ([`ReadCache::load`]). Concurrent loads of the same (object, range)
//!    share one GET (single flight), at most [`CacheSettings::gets_in_flight`] GETs run at
//!    once, and the result goes into the disk cache.
//!
//! Where it sits: the fetch pass reads synchronously and never awaits, so it calls
//! [`ReadCache::get`] (memory and local disk only, no network). What that lacks, the
//! partition's `prepare_read` loads with [`ReadCache::load`] outside the pass, then the pass
//! runs again and finds the range with `get`. The bytes are returned as stored or as read;
//! the caller checks their CRCs ([`crate::reader::verify_run`]) before serving them.
//!
//! So that "load, then get" always finds the range, a loaded range the disk cache cannot keep
//! (disk cache disabled, range larger than it, a failed write such as ENOSPC) is kept in the
//! memory cache instead, under the same byte bound. A disk write failure never fails a read.
//!
//! ## The disk cache across restarts
//!
//! [`ReadCache::open`] deletes the cache files an earlier run left in the directory and starts
//! empty: validating them (was the file completely written? is it the same bucket and
//! prefix?) costs more than refilling the cache from the bucket. Files are written without
//! `fsync` for the same reason: nothing depends on them surviving a crash. Only files whose
//! names this cache makes (`<sequence>-<start>-<end>`, `tmp-<n>`) are deleted; anything else in
//! the directory is left alone and not counted.
//!
//! ## Bounds
//!
//! - memory: [`CacheSettings::memory_bytes`] counts exactly the bytes of the entries held (a
//!   slice handed out keeps its object's buffer alive until the caller drops it; that memory
//!   belongs to the caller's response, not to the cache);
//! - disk: [`CacheSettings::disk_bytes`] counts exactly the bytes of the cache files (plus at
//!   most `gets_in_flight` temporary files being written);
//! - network: at most [`CacheSettings::gets_in_flight`] GETs at once. Loads waiting for a
//!   permit are bounded by their callers (each fetch asks for the runs of the partitions it
//!   reads), and each waits at most the client's request timeout once it has a permit.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs;
use std::io;
use std::ops::Range;
use std::path::{Path as FsPath, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;
use futures_util::future::{BoxFuture, FutureExt, Shared};
use object_store::path::Path;
use object_store::{GetOptions, ObjectStore};
use tokio::sync::Semaphore;

use crate::Bucket;
use crate::name::data_object_name;
#[cfg(test)]
use crate::name::object_name;

/// Default bound of the recent-objects cache: sixteen flush objects of the default 4 MiB, i.e.
/// the last two seconds of a busy broker at the default linger, which is where tail readers
/// are. Part of the broker's memory budget.
pub const MEMORY_BYTES_DEFAULT: usize = 64 << 20;

/// Default bound of the disk cache (`--cache-bytes`): enough for the ranges that catching-up
/// consumers reread, small next to any disk a broker runs on.
pub const DISK_BYTES_DEFAULT: u64 = 1 << 30;

/// Default bound on GETs at once. An S3 GET of a run takes tens of milliseconds, mostly
/// waiting; 16 keeps a catching-up consumer's reads flowing without letting one burst of
/// cold reads open hundreds of connections.
pub const GETS_IN_FLIGHT_DEFAULT: usize = 16;

/// Where the disk cache lives under the data directory.
pub const CACHE_DIR: &str = "objstore/cache";

/// Prefix of the name a cache file is written under before it is renamed into place.
const TMP_PREFIX: &str = "tmp-";

/// The bounds and place of a [`ReadCache`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheSettings {
    /// Bytes of the memory cache: recent objects, plus loaded ranges the disk cache could not
    /// keep. 0 keeps nothing in memory.
    pub memory_bytes: usize,
    /// Bytes of the disk cache (`--cache-bytes`); 0 disables it.
    pub disk_bytes: u64,
    /// The disk cache's directory (`<data_dir>/objstore/cache`). Created at open.
    pub dir: PathBuf,
    /// How many ranged GETs may run at once; at least 1.
    pub gets_in_flight: usize,
}

impl CacheSettings {
    /// The defaults, with the disk cache under `data_dir` ([`CACHE_DIR`]).
    pub fn new(data_dir: &FsPath) -> CacheSettings {
        CacheSettings {
            memory_bytes: MEMORY_BYTES_DEFAULT,
            disk_bytes: DISK_BYTES_DEFAULT,
            dir: data_dir.join(CACHE_DIR),
            gets_in_flight: GETS_IN_FLIGHT_DEFAULT,
        }
    }
}

/// What went wrong opening the cache or loading a range. Each prints as one line naming the
/// object key and the byte range. Cloneable, because every load that joined a shared GET gets
/// the same outcome.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CacheError {
    /// The settings cannot work.
    #[error("read cache settings: {0}")]
    Settings(&'static str),
    /// The disk cache directory could not be created or emptied.
    #[error("cannot prepare the read cache directory {}: {source}", dir.display())]
    Dir {
        dir: PathBuf,
        #[source]
        source: Arc<io::Error>,
    },
    /// The range asked for is empty or reversed (a caller bug).
    #[error("bytes {range:?} of {key}: the range is empty or reversed")]
    BadRange { key: String, range: Range<u64> },
    /// The object is not in the bucket (deleted by retention or compaction after the read
    /// found it in the index, or the index is wrong).
    #[error("GET {key} bytes {range:?}: the object does not exist")]
    NotFound {
        key: String,
        range: Range<u64>,
        #[source]
        source: Arc<object_store::Error>,
    },
    /// The GET failed (after the client's own retries). The store's message is put on one
    /// line (S3 error bodies are XML over several).
    #[error("GET {key} bytes {range:?}: {}", one_line(source))]
    Get {
        key: String,
        range: Range<u64>,
        #[source]
        source: Arc<object_store::Error>,
    },
    /// The bucket returned fewer bytes than asked: the range passes the end of the object.
    #[error(
        "GET {key} bytes {range:?}: got {got} bytes of the {} asked; the object holds {size} bytes",
        range.end - range.start
    )]
    Short {
        key: String,
        range: Range<u64>,
        got: u64,
        size: u64,
    },
    /// The task doing the GET ended without an answer (it panicked, or the runtime is
    /// shutting down).
    #[error("GET {key} bytes {range:?}: the load was abandoned ({why})")]
    Abandoned {
        key: String,
        range: Range<u64>,
        why: String,
    },
}

/// `e` as one line: line breaks become spaces.
fn one_line(e: &impl std::fmt::Display) -> String {
    e.to_string()
        .split(['\r', '\n'])
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

/// Counters and sizes of a [`ReadCache`], for `/metrics` and tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Bytes held in memory (objects and ranges).
    pub memory_bytes: usize,
    /// Whole objects held in memory.
    pub memory_objects: usize,
    /// Loaded ranges held in memory because the disk cache could not keep them.
    pub memory_ranges: usize,
    /// Bytes of the disk cache's files.
    pub disk_bytes: u64,
    /// Ranges in the disk cache.
    pub disk_entries: usize,
    /// [`ReadCache::get`] calls answered from memory.
    pub hits_memory: u64,
    /// [`ReadCache::get`] calls answered from disk.
    pub hits_disk: u64,
    /// [`ReadCache::get`] calls that found nothing.
    pub misses: u64,
    /// Ranged GETs started.
    pub gets: u64,
    /// Bytes received by GETs that succeeded.
    pub get_bytes: u64,
    /// Loads that joined a GET already in flight for the same range instead of starting one.
    pub single_flight_joins: u64,
    /// Entries evicted to stay within a bound (memory and disk).
    pub evictions: u64,
    /// Loaded ranges the disk cache failed to write (kept in memory instead).
    pub disk_write_failures: u64,
}

/// A byte range of one object: the unit of the disk cache and of single flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct RangeKey {
    sequence: u64,
    start: u64,
    end: u64,
}

impl RangeKey {
    fn range(self) -> Range<u64> {
        self.start..self.end
    }

    fn len(self) -> u64 {
        self.end - self.start
    }

    fn file_name(self) -> String {
        format!("{:020}-{}-{}", self.sequence, self.start, self.end)
    }
}

/// Whether `name` is a file this cache writes (a cache entry or a temporary file).
fn is_cache_file(name: &str) -> bool {
    if let Some(n) = name.strip_prefix(TMP_PREFIX) {
        return !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit());
    }
    let parts: Vec<&str> = name.split('-').collect();
    parts.len() == 3
        && parts
            .iter()
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
}

/// What the memory cache holds an entry for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum MemKey {
    Object(u64),
    Range(RangeKey),
}

/// The memory cache. Entries leave in insertion order.
#[derive(Debug, Default)]
struct Memory {
    limit: usize,
    bytes: usize,
    next: u64,
    entries: HashMap<MemKey, (Bytes, u64)>,
    /// Insertion number → entry, oldest first.
    order: BTreeMap<u64, MemKey>,
    objects: usize,
}

impl Memory {
    fn remove(&mut self, key: MemKey) -> bool {
        let Some((bytes, n)) = self.entries.remove(&key) else {
            return false;
        };
        self.order.remove(&n);
        self.bytes -= bytes.len();
        if matches!(key, MemKey::Object(_)) {
            self.objects -= 1;
        }
        true
    }

    /// Inserts (or replaces) `key`; returns how many entries were evicted. An entry larger
    /// than the whole bound is not kept.
    fn insert(&mut self, key: MemKey, bytes: Bytes) -> u64 {
        self.remove(key);
        if bytes.len() > self.limit {
            return 0;
        }
        let n = self.next;
        self.next += 1;
        self.bytes += bytes.len();
        self.entries.insert(key, (bytes, n));
        self.order.insert(n, key);
        if matches!(key, MemKey::Object(_)) {
            self.objects += 1;
        }
        let mut evicted = 0;
        while self.bytes > self.limit {
            let Some((_, oldest)) = self.order.first_key_value() else {
                break;
            };
            let oldest = *oldest;
            self.remove(oldest);
            evicted += 1;
        }
        evicted
    }

    fn get(&self, key: RangeKey) -> Option<Bytes> {
        if let Some((object, _)) = self.entries.get(&MemKey::Object(key.sequence))
            && key.end <= object.len() as u64
        {
            return Some(object.slice(key.start as usize..key.end as usize));
        }
        self.entries
            .get(&MemKey::Range(key))
            .map(|(bytes, _)| bytes.clone())
    }

    fn contains(&self, key: RangeKey) -> bool {
        self.entries
            .get(&MemKey::Object(key.sequence))
            .is_some_and(|(o, _)| key.end <= o.len() as u64)
            || self.entries.contains_key(&MemKey::Range(key))
    }

    fn forget(&mut self, sequences: &HashSet<u64>) {
        let gone: Vec<MemKey> = self
            .entries
            .keys()
            .filter(|k| match k {
                MemKey::Object(s) => sequences.contains(s),
                MemKey::Range(r) => sequences.contains(&r.sequence),
            })
            .copied()
            .collect();
        for k in gone {
            self.remove(k);
        }
    }
}

/// The disk cache's bookkeeping: which files exist, how big, and how recently used.
#[derive(Debug)]
struct Disk {
    dir: PathBuf,
    limit: u64,
    bytes: u64,
    tick: u64,
    /// Entry → its last use.
    entries: HashMap<RangeKey, u64>,
    /// Last use → entry, least recent first.
    lru: BTreeMap<u64, RangeKey>,
}

impl Disk {
    fn path(&self, key: RangeKey) -> PathBuf {
        self.dir.join(key.file_name())
    }

    fn touch(&mut self, key: RangeKey) -> bool {
        let Some(used) = self.entries.get_mut(&key) else {
            return false;
        };
        self.lru.remove(used);
        self.tick += 1;
        *used = self.tick;
        self.lru.insert(self.tick, key);
        true
    }

    /// Drops the entry and deletes its file (a file already gone is fine).
    fn remove(&mut self, key: RangeKey) -> bool {
        let Some(used) = self.entries.remove(&key) else {
            return false;
        };
        self.lru.remove(&used);
        self.bytes -= key.len();
        let _ = fs::remove_file(self.path(key));
        true
    }

    /// Evicts least recently used entries until `incoming` more bytes fit.
    fn make_room(&mut self, incoming: u64) -> u64 {
        let mut evicted = 0;
        while self.bytes + incoming > self.limit {
            let Some((_, oldest)) = self.lru.first_key_value() else {
                break;
            };
            let oldest = *oldest;
            self.remove(oldest);
            evicted += 1;
        }
        evicted
    }

    fn add(&mut self, key: RangeKey) {
        self.tick += 1;
        self.entries.insert(key, self.tick);
        self.lru.insert(self.tick, key);
        self.bytes += key.len();
    }
}

#[derive(Debug, Default)]
struct Counters {
    hits_memory: AtomicU64,
    hits_disk: AtomicU64,
    misses: AtomicU64,
    gets: AtomicU64,
    get_bytes: AtomicU64,
    single_flight_joins: AtomicU64,
    evictions: AtomicU64,
    disk_write_failures: AtomicU64,
}

fn bump(counter: &AtomicU64, by: u64) {
    counter.fetch_add(by, Ordering::Relaxed);
}

type SharedLoad = Shared<BoxFuture<'static, Result<Bytes, CacheError>>>;

/// A GET in flight that later loads of the same range join.
struct Flight {
    id: u64,
    load: SharedLoad,
    /// Set by [`ReadCache::forget`]: the object is gone, do not cache what the GET returns.
    forgotten: Arc<AtomicBool>,
}

struct Inner {
    bucket: Bucket,
    memory: Mutex<Memory>,
    /// `None` when the disk cache is disabled.
    disk: Option<Mutex<Disk>>,
    flights: Mutex<HashMap<RangeKey, Flight>>,
    gets: Semaphore,
    next_id: AtomicU64,
    counters: Counters,
    /// Names object ids whose name is not their flush sequence (cluster mode: objects are
    /// numbered by the metadata store and named by the broker that wrote them).
    names: Option<ObjectNames>,
}

/// Maps an object id to its name relative to the storage prefix (cluster mode); `None` for an
/// id it does not know, which the cache then names as a flush object.
pub type ObjectNames = Arc<dyn Fn(u64) -> Option<String> + Send + Sync>;

/// Locks `m`, also after a panic elsewhere: every update of the guarded state completes
/// before anything that can panic, so the state is consistent.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The memory and disk caches of flush-object ranges, over one bucket. Cheap to share
/// behind an `Arc`; every method takes `&self`.
pub struct ReadCache {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for ReadCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadCache")
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

impl ReadCache {
    /// Opens the cache over `bucket`. The disk cache starts empty: the cache files of an
    /// earlier run are deleted (see the module doc); the directory is created if missing.
    /// With `disk_bytes` 0 the directory is only emptied if it exists.
    pub fn open(bucket: Bucket, settings: CacheSettings) -> Result<ReadCache, CacheError> {
        ReadCache::open_named(bucket, settings, None)
    }

    /// [`open`](Self::open), with object ids named by `names` (cluster mode) instead of as
    /// flush objects of one writer.
    pub fn open_named(
        bucket: Bucket,
        settings: CacheSettings,
        names: Option<ObjectNames>,
    ) -> Result<ReadCache, CacheError> {
        if settings.gets_in_flight == 0 {
            return Err(CacheError::Settings("gets_in_flight must be at least 1"));
        }
        let dir_err = |source: io::Error| CacheError::Dir {
            dir: settings.dir.clone(),
            source: Arc::new(source),
        };
        if settings.disk_bytes > 0 {
            fs::create_dir_all(&settings.dir).map_err(dir_err)?;
        }
        match fs::read_dir(&settings.dir) {
            Ok(listing) => {
                for entry in listing {
                    let entry = entry.map_err(dir_err)?;
                    let name = entry.file_name();
                    if name.to_str().is_some_and(is_cache_file) {
                        fs::remove_file(entry.path()).map_err(dir_err)?;
                    }
                }
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound && settings.disk_bytes == 0 => {}
            Err(e) => return Err(dir_err(e)),
        }
        let disk = (settings.disk_bytes > 0).then(|| {
            Mutex::new(Disk {
                dir: settings.dir.clone(),
                limit: settings.disk_bytes,
                bytes: 0,
                tick: 0,
                entries: HashMap::new(),
                lru: BTreeMap::new(),
            })
        });
        Ok(ReadCache {
            inner: Arc::new(Inner {
                bucket,
                memory: Mutex::new(Memory {
                    limit: settings.memory_bytes,
                    ..Memory::default()
                }),
                disk,
                flights: Mutex::new(HashMap::new()),
                gets: Semaphore::new(settings.gets_in_flight),
                next_id: AtomicU64::new(0),
                counters: Counters::default(),
                names,
            }),
        })
    }

    /// Keeps a just-written object (its whole bytes) in memory. Objects leave in the order
    /// they came, once the memory bound is passed; an object larger than the bound is not
    /// kept. Replaces an earlier copy of the same sequence.
    pub fn insert_object(&self, sequence: u64, bytes: Bytes) {
        let evicted = lock(&self.inner.memory).insert(MemKey::Object(sequence), bytes);
        bump(&self.inner.counters.evictions, evicted);
    }

    /// The bytes of `range` of object `sequence` if memory or the local disk holds them, else
    /// `None`. Never touches the network; may read a local file. Counts a hit or a miss.
    pub fn get(&self, sequence: u64, range: Range<u64>) -> Option<Bytes> {
        let c = &self.inner.counters;
        if range.start >= range.end {
            bump(&c.misses, 1);
            return None;
        }
        let key = RangeKey {
            sequence,
            start: range.start,
            end: range.end,
        };
        if let Some(b) = lock(&self.inner.memory).get(key) {
            bump(&c.hits_memory, 1);
            return Some(b);
        }
        if let Some(b) = self.inner.read_disk(key) {
            bump(&c.hits_disk, 1);
            return Some(b);
        }
        bump(&c.misses, 1);
        None
    }

    /// Whether memory or local disk holds `range` of object `sequence` (reads nothing and
    /// counts nothing: for deciding whether a [`load`](Self::load) is needed).
    pub fn contains(&self, sequence: u64, range: Range<u64>) -> bool {
        range.start < range.end
            && self.inner.contains(RangeKey {
                sequence,
                start: range.start,
                end: range.end,
            })
    }

    /// Loads `range` of object `sequence`: from the caches if they hold it, else with one
    /// ranged GET that every concurrent load of the same range shares. What the GET returns
    /// goes into the disk cache (or, if that cannot keep it, the memory cache), so a
    /// [`get`](Self::get) right after a successful load finds it. The bytes are returned as
    /// read; the caller checks their CRCs. A failed GET is not remembered: the next load
    /// tries again. Must run inside a Tokio runtime (the GET is a task of its own, so it
    /// completes and fills the cache even if every caller stops waiting).
    pub async fn load(&self, sequence: u64, range: Range<u64>) -> Result<Bytes, CacheError> {
        if range.start >= range.end {
            return Err(CacheError::BadRange {
                key: self.inner.key(sequence).to_string(),
                range,
            });
        }
        let key = RangeKey {
            sequence,
            start: range.start,
            end: range.end,
        };
        if let Some(b) = self.inner.lookup(key) {
            return Ok(b);
        }
        let load = {
            let mut flights = lock(&self.inner.flights);
            if let Some(flight) = flights.get(&key) {
                bump(&self.inner.counters.single_flight_joins, 1);
                flight.load.clone()
            } else if self.inner.contains(key) {
                // A flight ended (and filled the cache) since the lookup above.
                drop(flights);
                if let Some(b) = self.inner.lookup(key) {
                    return Ok(b);
                }
                self.start_flight(key, &mut lock(&self.inner.flights))
            } else {
                self.start_flight(key, &mut flights)
            }
        };
        load.await
    }

    fn start_flight(&self, key: RangeKey, flights: &mut HashMap<RangeKey, Flight>) -> SharedLoad {
        if let Some(flight) = flights.get(&key) {
            bump(&self.inner.counters.single_flight_joins, 1);
            return flight.load.clone();
        }
        let id = self.inner.next_id.fetch_add(1, Ordering::Relaxed);
        let forgotten = Arc::new(AtomicBool::new(false));
        let inner = Arc::clone(&self.inner);
        let flag = Arc::clone(&forgotten);
        // The flights lock is held by our caller until the flight is registered, so the
        // task's removal below always finds it.
        let task = tokio::spawn(async move {
            let result = inner.fetch(key).await;
            if let Ok(bytes) = &result {
                inner.keep_loaded(key, bytes, &flag);
            }
            let mut flights = lock(&inner.flights);
            if flights.get(&key).is_some_and(|f| f.id == id) {
                flights.remove(&key);
            }
            result
        });
        let path = self.inner.key(key.sequence).to_string();
        let load = async move {
            match task.await {
                Ok(result) => result,
                Err(e) => Err(CacheError::Abandoned {
                    key: path,
                    range: key.range(),
                    why: e.to_string(),
                }),
            }
        }
        .boxed()
        .shared();
        flights.insert(
            key,
            Flight {
                id,
                load: load.clone(),
                forgotten,
            },
        );
        load
    }

    /// Drops everything cached of these objects (deleted by retention or compaction), in
    /// memory and on disk; a GET of one of them in flight completes but is not cached.
    pub fn forget(&self, sequences: &[u64]) {
        let set: HashSet<u64> = sequences.iter().copied().collect();
        for (key, flight) in lock(&self.inner.flights).iter() {
            if set.contains(&key.sequence) {
                flight.forgotten.store(true, Ordering::Relaxed);
            }
        }
        lock(&self.inner.memory).forget(&set);
        if let Some(disk) = &self.inner.disk {
            let mut disk = lock(disk);
            let gone: Vec<RangeKey> = disk
                .entries
                .keys()
                .filter(|k| set.contains(&k.sequence))
                .copied()
                .collect();
            for k in gone {
                disk.remove(k);
            }
        }
    }

    /// Sizes and counters.
    pub fn stats(&self) -> CacheStats {
        let c = &self.inner.counters;
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let (memory_bytes, memory_objects, memory_entries) = {
            let m = lock(&self.inner.memory);
            (m.bytes, m.objects, m.entries.len())
        };
        let (disk_bytes, disk_entries) = match &self.inner.disk {
            Some(d) => {
                let d = lock(d);
                (d.bytes, d.entries.len())
            }
            None => (0, 0),
        };
        CacheStats {
            memory_bytes,
            memory_objects,
            memory_ranges: memory_entries - memory_objects,
            disk_bytes,
            disk_entries,
            hits_memory: load(&c.hits_memory),
            hits_disk: load(&c.hits_disk),
            misses: load(&c.misses),
            gets: load(&c.gets),
            get_bytes: load(&c.get_bytes),
            single_flight_joins: load(&c.single_flight_joins),
            evictions: load(&c.evictions),
            disk_write_failures: load(&c.disk_write_failures),
        }
    }
}

impl Inner {
    /// The key of the object with id `sequence` (a flush or a compacted object).
    fn key(&self, sequence: u64) -> Path {
        if let Some(name) = self.names.as_ref().and_then(|names| names(sequence)) {
            return self.bucket.key(&name);
        }
        self.bucket.key(&data_object_name("", sequence))
    }

    /// Memory, then disk; counts nothing.
    fn lookup(&self, key: RangeKey) -> Option<Bytes> {
        if let Some(b) = lock(&self.memory).get(key) {
            return Some(b);
        }
        self.read_disk(key)
    }

    fn contains(&self, key: RangeKey) -> bool {
        lock(&self.memory).contains(key)
            || self
                .disk
                .as_ref()
                .is_some_and(|d| lock(d).entries.contains_key(&key))
    }

    /// Reads the disk cache's file of `key`, outside the lock. A file that cannot be read or
    /// has the wrong length is dropped from the cache (a miss).
    fn read_disk(&self, key: RangeKey) -> Option<Bytes> {
        let disk = self.disk.as_ref()?;
        let path = {
            let mut d = lock(disk);
            if !d.touch(key) {
                return None;
            }
            d.path(key)
        };
        match fs::read(&path) {
            Ok(data) if data.len() as u64 == key.len() => Some(Bytes::from(data)),
            _ => {
                // Evicted meanwhile (then this removes nothing) or damaged.
                lock(disk).remove(key);
                None
            }
        }
    }

    /// One ranged GET, within the bound on GETs at once.
    async fn fetch(&self, key: RangeKey) -> Result<Bytes, CacheError> {
        let _permit = self
            .gets
            .acquire()
            .await
            .map_err(|e| CacheError::Abandoned {
                key: self.key(key.sequence).to_string(),
                range: key.range(),
                why: e.to_string(),
            })?;
        let path = self.key(key.sequence);
        bump(&self.counters.gets, 1);
        let failed = |e: object_store::Error| match e {
            object_store::Error::NotFound { .. } => CacheError::NotFound {
                key: path.to_string(),
                range: key.range(),
                source: Arc::new(e),
            },
            e => CacheError::Get {
                key: path.to_string(),
                range: key.range(),
                source: Arc::new(e),
            },
        };
        let options = GetOptions::new().with_range(Some(key.range()));
        let result = self
            .bucket
            .store()
            .get_opts(&path, options)
            .await
            .map_err(failed)?;
        let size = result.meta.size;
        let bytes = result.bytes().await.map_err(failed)?;
        if bytes.len() as u64 != key.len() {
            return Err(CacheError::Short {
                key: path.to_string(),
                range: key.range(),
                got: bytes.len() as u64,
                size,
            });
        }
        bump(&self.counters.get_bytes, key.len());
        Ok(bytes)
    }

    /// Puts a loaded range into the disk cache, or into memory if the disk cannot keep it.
    fn keep_loaded(&self, key: RangeKey, bytes: &Bytes, forgotten: &AtomicBool) {
        if forgotten.load(Ordering::Relaxed) {
            return;
        }
        if self.write_disk(key, bytes, forgotten) {
            return;
        }
        let mut memory = lock(&self.memory);
        // Checked again under the memory lock, which `forget` takes after setting the flag.
        if forgotten.load(Ordering::Relaxed) {
            return;
        }
        let evicted = memory.insert(MemKey::Range(key), bytes.clone());
        bump(&self.counters.evictions, evicted);
    }

    /// Writes `bytes` as the disk cache's file of `key`: to a temporary name, then renamed
    /// under the lock. False if the disk cache is disabled, the range is larger than it, or
    /// the write failed (the temporary file is removed).
    fn write_disk(&self, key: RangeKey, bytes: &Bytes, forgotten: &AtomicBool) -> bool {
        let Some(disk) = &self.disk else {
            return false;
        };
        let (dir, limit) = {
            let d = lock(disk);
            if d.entries.contains_key(&key) {
                return true;
            }
            (d.dir.clone(), d.limit)
        };
        if key.len() > limit {
            return false;
        }
        let n = self.next_id.fetch_add(1, Ordering::Relaxed);
        let tmp = dir.join(format!("{TMP_PREFIX}{n}"));
        if fs::write(&tmp, bytes).is_err() {
            let _ = fs::remove_file(&tmp);
            bump(&self.counters.disk_write_failures, 1);
            return false;
        }
        let mut d = lock(disk);
        if d.entries.contains_key(&key) || forgotten.load(Ordering::Relaxed) {
            let _ = fs::remove_file(&tmp);
            return true;
        }
        let evicted = d.make_room(key.len());
        bump(&self.counters.evictions, evicted);
        if fs::rename(&tmp, d.path(key)).is_err() {
            let _ = fs::remove_file(&tmp);
            bump(&self.counters.disk_write_failures, 1);
            return false;
        }
        d.add(key);
        true
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use object_store::memory::InMemory;
    use object_store::{ObjectStoreExt, PutPayload};
    use sluice_testkit::faulty::{ErrorKind, FaultyStore, Op};

    use super::*;
    use crate::StorageUrl;

    /// A fresh directory under the system temporary directory, removed on drop.
    struct TestDir(PathBuf);

    impl TestDir {
        fn new() -> TestDir {
            static N: AtomicU64 = AtomicU64::new(0);
            let dir = std::env::temp_dir().join(format!(
                "sluice-cache-test-{}-{}",
                std::process::id(),
                N.fetch_add(1, Ordering::Relaxed)
            ));
            let _ = fs::remove_dir_all(&dir);
            TestDir(dir)
        }

        fn cache(&self) -> PathBuf {
            self.0.join(CACHE_DIR)
        }
    }

    impl Drop for TestDir {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    struct Fixture {
        faulty: Arc<FaultyStore>,
        bucket: Bucket,
        dir: TestDir,
    }

    fn fixture() -> Fixture {
        let faulty = Arc::new(FaultyStore::new(Arc::new(InMemory::new())));
        let store: Arc<dyn ObjectStore> = faulty.clone();
        let bucket =
            Bucket::from_store(StorageUrl::parse("s3://bucket/p").unwrap(), store, "memory");
        Fixture {
            faulty,
            bucket,
            dir: TestDir::new(),
        }
    }

    impl Fixture {
        fn settings(&self, memory_bytes: usize, disk_bytes: u64) -> CacheSettings {
            CacheSettings {
                memory_bytes,
                disk_bytes,
                ..CacheSettings::new(&self.dir.0)
            }
        }

        fn open(&self, memory_bytes: usize, disk_bytes: u64) -> ReadCache {
            ReadCache::open(self.bucket.clone(), self.settings(memory_bytes, disk_bytes)).unwrap()
        }

        /// Puts object `sequence` of `len` bytes (byte i is `i % 251`) into the bucket.
        async fn put(&self, sequence: u64, len: usize) -> Bytes {
            let bytes = object(len);
            self.faulty
                .inner()
                .put(
                    &self.bucket.key(&object_name("", sequence)),
                    PutPayload::from(bytes.clone()),
                )
                .await
                .unwrap();
            bytes
        }

        fn files(&self) -> Vec<String> {
            let mut names: Vec<String> = match fs::read_dir(self.dir.cache()) {
                Ok(l) => l
                    .map(|e| e.unwrap().file_name().into_string().unwrap())
                    .collect(),
                Err(_) => Vec::new(),
            };
            names.sort();
            names
        }
    }

    fn object(len: usize) -> Bytes {
        (0..len)
            .map(|i| (i % 251) as u8)
            .collect::<Vec<u8>>()
            .into()
    }

    fn file(sequence: u64, range: Range<u64>) -> String {
        RangeKey {
            sequence,
            start: range.start,
            end: range.end,
        }
        .file_name()
    }

    #[test]
    fn memory_serves_slices_of_recent_objects_and_keeps_the_newest() {
        let f = fixture();
        let cache = f.open(100, 0);
        let one = object(40);
        cache.insert_object(1, one.clone());
        cache.insert_object(2, object(40));
        let hit = cache.get(1, 5..10).unwrap();
        assert_eq!(hit, one.slice(5..10));
        assert_eq!(hit.as_ptr(), one[5..].as_ptr(), "a slice, not a copy");
        let s = cache.stats();
        assert_eq!(
            (s.memory_bytes, s.memory_objects, s.hits_memory),
            (80, 2, 1)
        );

        // A third object passes the bound: the oldest leaves, the accounting stays exact.
        cache.insert_object(3, object(40));
        let s = cache.stats();
        assert_eq!((s.memory_bytes, s.memory_objects, s.evictions), (80, 2, 1));
        assert!(cache.get(1, 5..10).is_none());
        assert!(cache.get(2, 0..40).is_some());
        assert!(cache.get(3, 39..40).is_some());
        // Past the end of a held object, or empty: a miss, not a panic.
        assert!(cache.get(3, 30..41).is_none());
        assert!(cache.get(3, 7..7).is_none());
        assert_eq!(cache.stats().misses, 3);

        // An object larger than the whole bound is not kept and evicts nothing.
        cache.insert_object(4, object(101));
        assert!(cache.get(4, 0..1).is_none());
        assert_eq!(cache.stats().memory_bytes, 80);

        // Replacing a sequence counts it once.
        cache.insert_object(3, object(20));
        let s = cache.stats();
        assert_eq!((s.memory_bytes, s.memory_objects), (60, 2));
    }

    #[tokio::test]
    async fn named_objects_are_loaded_under_their_own_names() {
        let f = fixture();
        let name = crate::name::writer_object_name("b3-abcdef01", 9);
        let bytes = object(3000);
        f.faulty
            .inner()
            .put(&f.bucket.key(&name), PutPayload::from(bytes.clone()))
            .await
            .unwrap();
        let known = name.clone();
        let names: ObjectNames = Arc::new(move |id| (id == 42).then(|| known.clone()));
        let cache =
            ReadCache::open_named(f.bucket.clone(), f.settings(1 << 20, 1 << 20), Some(names))
                .unwrap();
        let got = cache.load(42, 100..900).await.unwrap();
        assert_eq!(got, bytes.slice(100..900));
        assert_eq!(cache.get(42, 100..900), Some(bytes.slice(100..900)));
        // An id it cannot name is a flush object, which does not exist here.
        assert!(cache.load(43, 0..10).await.is_err());
    }

    #[tokio::test]
    async fn concurrent_loads_share_one_get_then_disk_serves() {
        let f = fixture();
        let object = f.put(7, 1000).await;
        let cache = f.open(0, 1 << 20);
        assert!(cache.get(7, 100..300).is_none());
        f.faulty.set_latency(Op::Get, Duration::from_millis(100));

        let loads = (0..20).map(|_| cache.load(7, 100..300));
        for loaded in futures_util::future::join_all(loads).await {
            assert_eq!(loaded.unwrap(), object.slice(100..300));
        }
        assert_eq!(f.faulty.calls(Op::Get), 1);
        let s = cache.stats();
        assert_eq!((s.gets, s.get_bytes, s.single_flight_joins), (1, 200, 19));
        assert_eq!((s.disk_entries, s.disk_bytes), (1, 200));
        assert_eq!(f.files(), vec![file(7, 100..300)]);

        assert_eq!(cache.get(7, 100..300).unwrap(), object.slice(100..300));
        // A load of a cached range makes no GET.
        assert_eq!(cache.load(7, 100..300).await.unwrap().len(), 200);
        assert_eq!(f.faulty.calls(Op::Get), 1);
        let s = cache.stats();
        assert_eq!((s.hits_disk, s.misses), (1, 1));
    }

    #[tokio::test]
    async fn disk_evicts_the_least_recently_used_range() {
        let f = fixture();
        let object = f.put(3, 1000).await;
        let cache = f.open(0, 300);
        for start in [0, 100, 200] {
            cache.load(3, start..start + 100).await.unwrap();
        }
        assert_eq!(cache.stats().disk_bytes, 300);
        // 0..100 becomes the most recently used; 100..200 is now the least.
        assert!(cache.get(3, 0..100).is_some());
        cache.load(3, 300..400).await.unwrap();
        let s = cache.stats();
        assert_eq!((s.disk_bytes, s.disk_entries, s.evictions), (300, 3, 1));
        assert!(cache.get(3, 100..200).is_none());
        assert_eq!(cache.get(3, 0..100).unwrap(), object.slice(0..100));
        assert_eq!(
            f.files(),
            vec![file(3, 0..100), file(3, 200..300), file(3, 300..400)]
        );

        // A range larger than the whole disk cache is served and kept in memory instead.
        let cache = f.open(1000, 300);
        cache.load(3, 0..400).await.unwrap();
        assert!(cache.get(3, 0..400).is_some());
        let s = cache.stats();
        assert_eq!(
            (s.disk_entries, s.memory_ranges, s.memory_bytes),
            (0, 1, 400)
        );
    }

    #[tokio::test]
    async fn forget_drops_memory_and_disk() {
        let f = fixture();
        f.put(7, 500).await;
        f.put(8, 500).await;
        let cache = f.open(1000, 1000);
        cache.insert_object(1, object(100));
        cache.load(7, 0..50).await.unwrap();
        cache.load(7, 50..60).await.unwrap();
        cache.load(8, 0..50).await.unwrap();
        cache.forget(&[1, 7]);
        assert!(cache.get(1, 0..10).is_none());
        assert!(cache.get(7, 0..50).is_none());
        assert!(cache.get(8, 0..50).is_some());
        let s = cache.stats();
        assert_eq!((s.memory_bytes, s.memory_objects), (0, 0));
        assert_eq!((s.disk_bytes, s.disk_entries), (50, 1));
        assert_eq!(f.files(), vec![file(8, 0..50)]);
    }

    #[tokio::test]
    async fn a_failed_get_is_an_error_and_the_next_load_retries() {
        let f = fixture();
        let object = f.put(9, 100).await;
        let cache = f.open(0, 1000);
        f.faulty.fail_next(Op::Get, 1, ErrorKind::Generic);
        let e = cache.load(9, 10..20).await.unwrap_err();
        assert!(matches!(e, CacheError::Get { .. }), "{e:?}");
        let line = e.to_string();
        assert!(
            line.contains("p/objects/00000000000000000009.sluice") && line.contains("10..20"),
            "{line}"
        );
        assert!(cache.get(9, 10..20).is_none());
        assert_eq!(cache.load(9, 10..20).await.unwrap(), object.slice(10..20));
        assert_eq!(f.faulty.calls(Op::Get), 2);
        assert!(cache.get(9, 10..20).is_some());
    }

    #[tokio::test]
    async fn short_missing_and_empty_ranges_are_errors() {
        let f = fixture();
        f.put(5, 100).await;
        let cache = f.open(1000, 1000);
        let e = cache.load(5, 90..110).await.unwrap_err();
        assert!(
            matches!(
                e,
                CacheError::Short {
                    got: 10,
                    size: 100,
                    ..
                }
            ),
            "{e:?}"
        );
        assert!(e.to_string().contains("90..110"), "{e}");
        assert!(cache.load(5, 100..110).await.is_err());
        assert_eq!(one_line(&"a\r\nb\nc"), "a b c");
        let e = cache.load(6, 0..10).await.unwrap_err();
        assert!(matches!(e, CacheError::NotFound { .. }), "{e:?}");
        let e = cache.load(5, 10..10).await.unwrap_err();
        assert!(matches!(e, CacheError::BadRange { .. }), "{e:?}");
        let s = cache.stats();
        assert_eq!((s.disk_entries, s.memory_bytes), (0, 0), "nothing cached");
    }

    #[tokio::test]
    async fn disk_bytes_zero_disables_the_disk_cache() {
        let f = fixture();
        let object = f.put(4, 100).await;
        let cache = f.open(1000, 0);
        assert!(!f.dir.cache().exists());
        assert_eq!(cache.load(4, 0..60).await.unwrap(), object.slice(0..60));
        // Kept in memory so that the read after the load finds it.
        assert_eq!(cache.get(4, 0..60).unwrap(), object.slice(0..60));
        let s = cache.stats();
        assert_eq!((s.disk_entries, s.hits_disk, s.hits_memory), (0, 0, 1));
        assert_eq!((s.memory_ranges, s.memory_bytes), (1, 60));
        assert!(!f.dir.cache().exists());
    }

    #[tokio::test]
    async fn a_failed_disk_write_still_serves_the_read() {
        let f = fixture();
        let object = f.put(4, 100).await;
        let cache = f.open(1000, 1000);
        fs::remove_dir_all(f.dir.cache()).unwrap();
        assert_eq!(cache.load(4, 0..60).await.unwrap(), object.slice(0..60));
        assert_eq!(cache.get(4, 0..60).unwrap(), object.slice(0..60));
        let s = cache.stats();
        assert_eq!(
            (s.disk_write_failures, s.disk_entries, s.memory_ranges),
            (1, 0, 1)
        );
    }

    #[tokio::test]
    async fn gets_in_flight_bounds_concurrent_gets() {
        let f = fixture();
        f.put(2, 1000).await;
        let cache = ReadCache::open(
            f.bucket.clone(),
            CacheSettings {
                gets_in_flight: 2,
                ..f.settings(0, 1 << 20)
            },
        )
        .unwrap();
        f.faulty.set_latency(Op::Get, Duration::from_millis(100));
        let started = Instant::now();
        let loads = (0..6u64).map(|i| cache.load(2, i * 100..i * 100 + 100));
        for loaded in futures_util::future::join_all(loads).await {
            loaded.unwrap();
        }
        // Six GETs two at a time take at least three latencies.
        assert!(started.elapsed() >= Duration::from_millis(300));
        assert_eq!(f.faulty.calls(Op::Get), 6);
        assert!(
            ReadCache::open(
                f.bucket.clone(),
                CacheSettings {
                    gets_in_flight: 0,
                    ..f.settings(0, 0)
                }
            )
            .is_err()
        );
    }

    #[test]
    fn open_deletes_earlier_cache_files_only() {
        let f = fixture();
        let dir = f.dir.cache();
        fs::create_dir_all(&dir).unwrap();
        for name in [file(1, 0..10), "tmp-3".into(), "notes.txt".into()] {
            fs::write(dir.join(name), b"x").unwrap();
        }
        let cache = f.open(0, 1000);
        assert_eq!(f.files(), vec!["notes.txt".to_string()]);
        assert!(cache.get(1, 0..10).is_none());
        assert_eq!(cache.stats().disk_bytes, 0);
    }
}
