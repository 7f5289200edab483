//! The writer lease: one writer per bucket prefix.
//!
//! In object-storage mode a broker is the only writer of its prefix. Flush objects are named by
//! sequence number and created if absent, so two writers can never both write object `n`; the
//! lease makes the *second* broker the one that stops, at start and with a clear error, instead
//! of two brokers fencing each other object by object. Where it sits: `sluice serve
//! --storage s3://BUCKET/PREFIX` → [`Lease::acquire`] before anything is written → every flush
//! object carries [`Lease::epoch`] in its header as the fencing generation → a [`LeaseKeeper`]
//! renews it in the background; the flusher stops acknowledging as soon as the keeper reports
//! it lost (or its validity runs out) → [`LeaseKeeper::shutdown`] releases it on a clean stop.
//!
//! # The lease object: `PREFIX/writer`
//!
//! A small UTF-8 text object, one `key: value` per line after a fixed first line, so an
//! operator can read it with any S3 tool (`mc cat`, `aws s3 cp s3://BUCKET/PREFIX/writer -`):
//!
//! ```text
//! sluice writer lease v1
//! writer_id: 5f0c2d8e9a7b41c3b2e1d0f9a8b7c6d5
//! epoch: 3
//! host: broker-1
//! pid: 4242
//! started_ms: 1764000000000
//! renewed_ms: 1764000003000
//! duration_ms: 10000
//! writes: 2
//! state: held
//! ```
//!
//! - `writer_id`: 128 random bits, new at every process start ([`Lease::acquire`] draws it), so
//!   a restarted broker never mistakes the lease of its previous life for its own.
//! - `epoch`: 1 for the first writer of a prefix, +1 at every takeover. It never goes back,
//!   not even across [`Lease::release`] (which marks the lease released instead of deleting
//!   it), so it can serve as the fencing generation in every object header.
//! - `host`, `pid`, `started_ms`: who holds it and since when, for the error a second broker
//!   prints.
//! - `renewed_ms`, `duration_ms`: the holder's clock at its last write and the lease duration
//!   it promised to renew within. The lease is live while `now < renewed_ms + duration_ms`
//!   by the observer's clock. The holder's own duration counts, not the observer's setting.
//! - `writes`: how many times this holder has written the lease. MinIO's ETag is the MD5 of
//!   the body, so this counter keeps every body (and thus every ETag) distinct even when the
//!   clock has not moved between two writes.
//! - `state`: `held`, or `released` after a clean shutdown (free to take at once).
//!
//! Unknown keys are ignored (a newer version may add some); a missing key, a bad value or a
//! body over [`LEASE_BYTES_MAX`] is [`LeaseError::Corrupt`] and nobody writes until an
//! operator looks.
//!
//! # Design: conditional update on the ETag (`If-Match`)
//!
//! - Acquiring a free prefix creates the lease if absent (`PutMode::Create`, `If-None-Match: *`).
//! - Renewing, taking over an expired or released lease, and releasing are conditional updates
//!   on the ETag last seen (`PutMode::Update`, `If-Match`). Of two brokers racing to take over,
//!   exactly one update succeeds; the other gets 412 and re-reads a live lease: `Held`.
//! - The alternative, epoch-numbered lease objects created if absent (`PREFIX/writer/<epoch>`,
//!   the highest listed being current), was not needed: the MinIO that object-storage mode is
//!   tested against and `object_store` 0.14 both support `If-Match` on PUT, as
//!   `tests/lease_minio.rs` checks first (stale ETag → 412 → `Error::Precondition`, missing
//!   object → 404 mapped to `Error::Precondition`, 8 racing updates → 1 winner). One object is
//!   simpler: no listing on the hot renewal path, no pile of old lease objects to clean up,
//!   and S3 lists are the one operation whose consistency some S3-compatible stores weaken.
//! - Deletes cannot be conditional through `object_store`, which is another reason release
//!   rewrites the lease as `released` rather than deleting it.
//!
//! # Lost responses
//!
//! A conditional PUT whose answer is lost (timeout, dropped connection) may still have been
//! applied. The next conditional write then fails on an ETag the lease no longer has. Before
//! calling that a takeover, the lease re-reads the object: if it carries this writer's id and
//! epoch, the write was its own, and it carries on from the ETag it just read.
//!
//! # Time and what the holder must do
//!
//! - Every lease operation is bounded by [`LeaseSettings::op_timeout`]; a store that is down
//!   or hung gives [`LeaseError::Store`] or [`LeaseError::Timeout`] within that bound.
//! - A failed renewal does not lose the lease: no one may take it over before
//!   `renewed_ms + duration_ms`. The holder stays valid until [`Lease::valid_until_ms`]: the
//!   clock reading taken just *before* its last successful write, plus the duration, which is
//!   never later than what any observer computes from the object.
//! - **The holder must stop acknowledging writes once its validity has run out without a
//!   successful renewal** ([`LeaseKeeper::writable_epoch`] says so, and the keeper's watch
//!   channel turns to [`LeaseStatus::Lost`]). Object PUTs already in flight may still land;
//!   create-if-absent on sequence numbers and the epoch in each header fence those.
//! - The lease compares wall clocks of different hosts. Hosts are assumed to agree within a
//!   small fraction of the duration (NTP does far better); a skew of more than
//!   `duration - renew_interval` could let a taker in while the holder still writes, which the
//!   object-level fence (create-if-absent) still catches.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use object_store::path::Path;
use object_store::{
    Error as StoreError, ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload,
    UpdateVersion,
};
use tokio::sync::watch;

/// How long a lease stays live after its last renewal. It is how long a crashed broker blocks
/// a new one on the same prefix (a restart after a crash waits up to this long), and it must
/// span several renewal attempts so that one slow or failed S3 request never loses the lease.
/// 10 s: three renewals at [`DEFAULT_RENEW_INTERVAL`] fit in it, and a restart waits briefly.
pub const DEFAULT_LEASE_DURATION: Duration = Duration::from_secs(10);

/// How often the holder renews: about a third of [`DEFAULT_LEASE_DURATION`], so two renewals
/// in a row may fail (S3 hiccup, a stalled connection) before the lease is at risk.
pub const DEFAULT_RENEW_INTERVAL: Duration = Duration::from_secs(3);

/// The bound on one lease operation (GET or PUT, retries included). Shorter than the renewal
/// interval, so that a hung store shows up as an error before the next renewal is due and a
/// renewal never overlaps the next one.
pub const DEFAULT_OP_TIMEOUT: Duration = Duration::from_secs(2);

/// The largest lease object this code reads. A real one is about 250 bytes; the bound keeps a
/// foreign or damaged object from making the broker allocate without limit.
pub const LEASE_BYTES_MAX: u64 = 4096;

/// The longest host name written into the lease (longer ones are cut; DNS allows 253).
const HOST_CHARS_MAX: usize = 253;

/// How many times [`Lease::acquire`] re-reads the lease after losing a race before it gives
/// up. A lost race means another broker just wrote a live lease, so the second read almost
/// always ends in `Held`; the bound only stops a pathological flip-flop from spinning.
const ACQUIRE_ATTEMPTS_MAX: u32 = 4;

/// The first line of every lease object: names the format and its version.
const LEASE_FIRST_LINE: &str = "sluice writer lease v1";

/// The lease object's name under the prefix.
pub const LEASE_OBJECT: &str = "writer";

/// Wall-clock time in milliseconds since the Unix epoch, passed in so tests control it. The
/// broker passes its own clock (`move || clock.now_ms()` adapts one); [`SystemClock`] reads
/// the system's.
pub trait LeaseClock: Send + Sync {
    fn now_ms(&self) -> i64;
}

impl<F: Fn() -> i64 + Send + Sync> LeaseClock for F {
    fn now_ms(&self) -> i64 {
        self()
    }
}

/// The system's wall clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl LeaseClock for SystemClock {
    fn now_ms(&self) -> i64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0)
    }
}

/// The lease timings. [`Default`] gives the documented defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseSettings {
    /// How long the lease stays live after a renewal ([`DEFAULT_LEASE_DURATION`]).
    pub duration: Duration,
    /// How often [`LeaseKeeper`] renews ([`DEFAULT_RENEW_INTERVAL`]).
    pub renew_interval: Duration,
    /// The bound on one lease operation ([`DEFAULT_OP_TIMEOUT`]).
    pub op_timeout: Duration,
}

impl Default for LeaseSettings {
    fn default() -> Self {
        LeaseSettings {
            duration: DEFAULT_LEASE_DURATION,
            renew_interval: DEFAULT_RENEW_INTERVAL,
            op_timeout: DEFAULT_OP_TIMEOUT,
        }
    }
}

impl LeaseSettings {
    /// Checks that renewals can keep the lease: at least two renewal intervals fit in the
    /// duration, and one operation ends before the next renewal is due.
    pub fn validate(&self) -> Result<(), LeaseError> {
        let bad = |what: String| Err(LeaseError::Settings(what));
        if self.renew_interval.is_zero() || self.op_timeout.is_zero() {
            return bad("the renewal interval and the operation timeout must be above 0".into());
        }
        if self.renew_interval * 2 > self.duration {
            return bad(format!(
                "the renewal interval ({:?}) must be at most half the lease duration ({:?}), \
                 so that one failed renewal does not lose the lease",
                self.renew_interval, self.duration
            ));
        }
        if self.op_timeout > self.renew_interval {
            return bad(format!(
                "the operation timeout ({:?}) must not exceed the renewal interval ({:?})",
                self.op_timeout, self.renew_interval
            ));
        }
        if self.duration.as_millis() > i64::MAX as u128 / 2 {
            return bad(format!(
                "the lease duration ({:?}) is too long",
                self.duration
            ));
        }
        Ok(())
    }
}

/// A writer's identity: 128 random bits drawn at each process start.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct WriterId(pub u128);

impl WriterId {
    /// A fresh random id: 16 bytes of the kernel's randomness (`/dev/urandom`, which never
    /// blocks once the system has booted). Without it, std's per-process random hash keys
    /// mixed with the time and pid. Uniqueness is all that matters here (no secret rests on
    /// it), so the crate takes no random-number dependency for this one call.
    pub fn random() -> WriterId {
        use std::io::Read;
        let mut bytes = [0u8; 16];
        let from_kernel = std::fs::File::open("/dev/urandom")
            .and_then(|mut f| f.read_exact(&mut bytes))
            .is_ok();
        if from_kernel {
            return WriterId(u128::from_le_bytes(bytes));
        }
        use std::hash::{BuildHasher, Hasher};
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let half = |salt: u64| {
            let mut h = std::collections::hash_map::RandomState::new().build_hasher();
            h.write_u128(nanos);
            h.write_u32(std::process::id());
            h.write_u64(salt);
            h.finish()
        };
        WriterId((u128::from(half(1)) << 64) | u128::from(half(2)))
    }
}

impl fmt::Display for WriterId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:032x}", self.0)
    }
}

/// The fencing generation: 1 for the first writer of a prefix, +1 at every takeover.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct Epoch(pub u64);

impl fmt::Display for Epoch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// The contents of the lease object (see the module doc for each field's why).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseRecord {
    pub writer_id: WriterId,
    pub epoch: Epoch,
    pub host: String,
    pub pid: u32,
    pub started_ms: i64,
    pub renewed_ms: i64,
    pub duration_ms: u64,
    pub writes: u64,
    pub released: bool,
}

impl LeaseRecord {
    /// True while the lease blocks other writers at `now_ms` (observer's clock). A lease
    /// renewed "in the future" (clock skew) is live too.
    pub fn is_live_at(&self, now_ms: i64) -> bool {
        !self.released && now_ms < self.expires_ms()
    }

    /// When the lease stops being live, by the holder's clock.
    pub fn expires_ms(&self) -> i64 {
        self.renewed_ms
            .saturating_add(i64::try_from(self.duration_ms).unwrap_or(i64::MAX))
    }

    /// The object body.
    pub fn encode(&self) -> String {
        format!(
            "{LEASE_FIRST_LINE}\nwriter_id: {}\nepoch: {}\nhost: {}\npid: {}\nstarted_ms: {}\n\
             renewed_ms: {}\nduration_ms: {}\nwrites: {}\nstate: {}\n",
            self.writer_id,
            self.epoch,
            self.host,
            self.pid,
            self.started_ms,
            self.renewed_ms,
            self.duration_ms,
            self.writes,
            if self.released { "released" } else { "held" },
        )
    }

    /// Parses an object body; the error says what is wrong with it.
    pub fn decode(body: &[u8]) -> Result<LeaseRecord, String> {
        let text = std::str::from_utf8(body).map_err(|e| format!("not UTF-8 text ({e})"))?;
        let mut lines = text.lines();
        match lines.next() {
            Some(LEASE_FIRST_LINE) => {}
            Some(other) => {
                return Err(format!(
                    "first line is {:?}, want {LEASE_FIRST_LINE:?}",
                    cut(other, 64)
                ));
            }
            None => return Err("empty".into()),
        }
        let mut fields: [Option<&str>; 9] = [None; 9];
        const KEYS: [&str; 9] = [
            "writer_id",
            "epoch",
            "host",
            "pid",
            "started_ms",
            "renewed_ms",
            "duration_ms",
            "writes",
            "state",
        ];
        for line in lines {
            if line.is_empty() {
                continue;
            }
            let (key, value) = line
                .split_once(": ")
                .ok_or_else(|| format!("line {:?} is not `key: value`", cut(line, 64)))?;
            if let Some(i) = KEYS.iter().position(|k| *k == key)
                && fields[i].replace(value).is_some()
            {
                return Err(format!("{key} appears twice"));
            }
        }
        let get = |i: usize| fields[i].ok_or_else(|| format!("{} is missing", KEYS[i]));
        fn num<T: std::str::FromStr>(key: &str, value: &str) -> Result<T, String> {
            value
                .parse()
                .map_err(|_| format!("{key} {:?} is not a valid number", cut(value, 64)))
        }
        let writer_id = get(0)?;
        if writer_id.len() != 32 {
            return Err(format!(
                "writer_id {:?} is not 32 hex digits",
                cut(writer_id, 64)
            ));
        }
        let writer_id = u128::from_str_radix(writer_id, 16)
            .map_err(|_| format!("writer_id {writer_id:?} is not 32 hex digits"))?;
        let released = match get(8)? {
            "held" => false,
            "released" => true,
            other => {
                return Err(format!(
                    "state {:?} is not held or released",
                    cut(other, 64)
                ));
            }
        };
        Ok(LeaseRecord {
            writer_id: WriterId(writer_id),
            epoch: Epoch(num(KEYS[1], get(1)?)?),
            host: get(2)?.to_owned(),
            pid: num(KEYS[3], get(3)?)?,
            started_ms: num(KEYS[4], get(4)?)?,
            renewed_ms: num(KEYS[5], get(5)?)?,
            duration_ms: num(KEYS[6], get(6)?)?,
            writes: num(KEYS[7], get(7)?)?,
            released,
        })
    }
}

/// At most `max` characters of `s`, for error messages about foreign data.
fn cut(s: &str, max: usize) -> &str {
    match s.char_indices().nth(max) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

/// A host name safe to write on one line of the lease: control characters become `?`.
fn clean_host(host: &str) -> String {
    let host = host.trim();
    if host.is_empty() {
        return "unknown-host".into();
    }
    cut(host, HOST_CHARS_MAX)
        .chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .collect()
}

/// This machine's host name (Linux: the kernel's; else `HOSTNAME`; else `unknown-host`).
fn this_host() -> String {
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_default();
    clean_host(&name)
}

/// Whether the lease's holder ran on this host under a process id that no longer exists: a
/// broker restarted after a crash (SIGKILL, OOM) then takes over at once instead of waiting
/// out the lease. Should the host name be shared by two machines, the takeover is still safe:
/// objects are created if absent, so the two writers' next objects collide and the one whose
/// epoch is not in the winning object stops, and the old holder's next renewal is fenced.
fn holder_died_here(record: &LeaseRecord, host: &str) -> bool {
    !host.is_empty()
        && record.host == host
        && record.pid != std::process::id()
        && std::path::Path::new("/proc/self").exists()
        && !process_runs(record.pid)
}

/// Whether process `pid` exists and has not exited: a killed process stays in `/proc` as a
/// zombie (state `Z`) until its parent reaps it.
fn process_runs(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state is the first field after the parenthesised command name.
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| !matches!(state, "Z" | "X" | "x")),
        Err(_) => false,
    }
}

/// "2 s" / "350 ms": how long ago something happened, for error messages.
fn ago(ms: i64) -> String {
    let ms = ms.max(0);
    if ms >= 1000 {
        format!("{} s", ms / 1000)
    } else {
        format!("{ms} ms")
    }
}

/// Why the lease cannot be had or kept. `Held` and `Fenced` are the two that mean "another
/// broker writes here"; `Store` and `Timeout` mean the bucket did not answer in time.
#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    /// Another writer holds a live lease on the prefix.
    #[error(
        "another broker (host {host}, pid {pid}, renewed {} ago) writes to {prefix}; stop it or \
         use another prefix",
        ago(*renewed_ago_ms)
    )]
    Held {
        prefix: String,
        host: String,
        pid: u32,
        writer_id: WriterId,
        epoch: Epoch,
        renewed_ago_ms: i64,
    },
    /// This writer's lease was taken over (or removed): it must stop writing at once.
    #[error("fenced: {now} on {prefix}; this broker must stop writing")]
    Fenced { prefix: String, now: String },
    /// The lease ran out before a renewal succeeded: this writer must stop acknowledging.
    #[error(
        "the writer lease on {prefix} expired {} ago without a successful renewal (last error: \
         {last_error}); this broker must stop writing",
        ago(*expired_ago_ms)
    )]
    Expired {
        prefix: String,
        expired_ago_ms: i64,
        last_error: String,
    },
    /// A lease operation failed in the object store.
    #[error("writer lease {path}: {op} failed: {source}")]
    Store {
        path: String,
        op: &'static str,
        #[source]
        source: StoreError,
    },
    /// A lease operation did not finish within [`LeaseSettings::op_timeout`].
    #[error("writer lease {path}: {op} did not finish within {timeout:?}")]
    Timeout {
        path: String,
        op: &'static str,
        timeout: Duration,
    },
    /// The lease object is not one this code wrote.
    #[error(
        "writer lease {path} is not a valid Sluice writer lease ({reason}); check what else \
         writes to this prefix"
    )]
    Corrupt { path: String, reason: String },
    /// Races for the lease kept being lost without a live winner to name.
    #[error("writer lease {path}: lost {attempts} races in a row; try again")]
    Contended { path: String, attempts: u32 },
    /// The settings cannot keep a lease.
    #[error("writer lease settings: {0}")]
    Settings(String),
    /// The keeper's renewal task ended abnormally (panicked or its runtime shut down).
    #[error("the writer lease renewal task ended abnormally: {0}")]
    Task(String),
}

impl LeaseError {
    /// True for the errors that mean another writer owns (or took) the prefix.
    pub fn is_other_writer(&self) -> bool {
        matches!(self, LeaseError::Held { .. } | LeaseError::Fenced { .. })
    }
}

/// The lease object of `prefix`.
pub fn lease_path(prefix: &Path) -> Path {
    prefix.clone().join(LEASE_OBJECT)
}

/// How a prefix is named in messages.
fn prefix_name(prefix: &Path) -> String {
    if prefix.as_ref().is_empty() {
        "the bucket root".into()
    } else {
        format!("prefix {prefix}")
    }
}

/// The store and where the lease lives in it: the I/O half of [`Lease`], shared with the
/// keeper's task.
#[derive(Clone)]
struct Site {
    store: Arc<dyn ObjectStore>,
    path: Path,
    prefix: String,
    op_timeout: Duration,
}

impl Site {
    async fn bounded<T>(
        &self,
        op: &'static str,
        fut: impl Future<Output = object_store::Result<T>>,
    ) -> Result<object_store::Result<T>, LeaseError> {
        tokio::time::timeout(self.op_timeout, fut)
            .await
            .map_err(|_| LeaseError::Timeout {
                path: self.path.to_string(),
                op,
                timeout: self.op_timeout,
            })
    }

    fn store_error(&self, op: &'static str, source: StoreError) -> LeaseError {
        LeaseError::Store {
            path: self.path.to_string(),
            op,
            source,
        }
    }

    /// Reads the lease: `None` if there is none.
    async fn read(&self) -> Result<Option<(LeaseRecord, UpdateVersion)>, LeaseError> {
        const OP: &str = "read";
        let body = self
            .bounded(OP, async {
                let got = self.store.get(&self.path).await?;
                let meta = got.meta.clone();
                if meta.size > LEASE_BYTES_MAX {
                    return Ok(Err(meta.size));
                }
                let body = got.bytes().await?;
                Ok(Ok((body, meta)))
            })
            .await?;
        let (body, meta) = match body {
            Ok(Ok(found)) => found,
            Ok(Err(size)) => {
                return Err(LeaseError::Corrupt {
                    path: self.path.to_string(),
                    reason: format!("{size} bytes, more than the {LEASE_BYTES_MAX} a lease has"),
                });
            }
            Err(StoreError::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(self.store_error(OP, e)),
        };
        let record = LeaseRecord::decode(&body).map_err(|reason| LeaseError::Corrupt {
            path: self.path.to_string(),
            reason,
        })?;
        let version = UpdateVersion {
            e_tag: meta.e_tag,
            version: meta.version,
        };
        Ok(Some((record, version)))
    }

    /// Writes `record` with `mode`. `Ok(Err(()))` means the condition failed (the object
    /// exists for a create, or has changed for an update).
    async fn write(
        &self,
        op: &'static str,
        record: &LeaseRecord,
        mode: PutMode,
    ) -> Result<Result<UpdateVersion, ()>, LeaseError> {
        let body = PutPayload::from(record.encode().into_bytes());
        let put = self
            .store
            .put_opts(&self.path, body, PutOptions::from(mode));
        match self.bounded(op, put).await? {
            Ok(done) => Ok(Ok(UpdateVersion::from(done))),
            Err(StoreError::AlreadyExists { .. } | StoreError::Precondition { .. }) => Ok(Err(())),
            Err(e) => Err(self.store_error(op, e)),
        }
    }

    fn held_by(&self, record: &LeaseRecord, now_ms: i64) -> LeaseError {
        LeaseError::Held {
            prefix: self.prefix.clone(),
            host: record.host.clone(),
            pid: record.pid,
            writer_id: record.writer_id,
            epoch: record.epoch,
            renewed_ago_ms: now_ms.saturating_sub(record.renewed_ms),
        }
    }

    fn fenced(&self, now: Option<&LeaseRecord>) -> LeaseError {
        let now = match now {
            Some(r) if r.released => format!(
                "the writer lease was taken over (epoch {}, host {}, pid {}) and released since",
                r.epoch, r.host, r.pid
            ),
            Some(r) => format!(
                "another broker (host {}, pid {}, epoch {}) took over the writer lease",
                r.host, r.pid, r.epoch
            ),
            None => "the writer lease object was deleted".into(),
        };
        LeaseError::Fenced {
            prefix: self.prefix.clone(),
            now,
        }
    }
}

/// A held writer lease. Obtain with [`Lease::acquire`]; keep with [`Lease::renew`] (or hand it
/// to [`Lease::keep`] for background renewal); give up with [`Lease::release`].
pub struct Lease {
    site: Site,
    clock: Arc<dyn LeaseClock>,
    settings: LeaseSettings,
    /// What this writer last wrote.
    record: LeaseRecord,
    /// The version of that write: the condition of the next one.
    version: UpdateVersion,
    /// The clock reading just before the last successful write, plus the duration.
    valid_until_ms: i64,
}

impl fmt::Debug for Lease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lease")
            .field("path", &self.site.path)
            .field("record", &self.record)
            .field("version", &self.version)
            .field("valid_until_ms", &self.valid_until_ms)
            .finish_non_exhaustive()
    }
}

impl Lease {
    /// Becomes the one writer of `prefix`, as a new writer (fresh random id, this host and
    /// pid); call it once per process start.
    ///
    /// - No lease yet: creates `PREFIX/writer` if absent, epoch 1.
    /// - A live lease of another writer: [`LeaseError::Held`], naming the holder.
    /// - An expired or released lease: takes it over with a conditional update on its ETag,
    ///   with the epoch +1. Of several brokers doing this at once exactly one wins; the others
    ///   get `Held` naming the winner.
    ///
    /// On `Ok` the lease object in the bucket holds this writer's record; no other writer can
    /// take it before [`Lease::valid_until_ms`] (by this writer's clock).
    pub async fn acquire(
        store: Arc<dyn ObjectStore>,
        prefix: &Path,
        clock: Arc<dyn LeaseClock>,
        settings: LeaseSettings,
    ) -> Result<Lease, LeaseError> {
        settings.validate()?;
        let site = Site {
            store,
            path: lease_path(prefix),
            prefix: prefix_name(prefix),
            op_timeout: settings.op_timeout,
        };
        let writer_id = WriterId::random();
        let host = this_host();
        let pid = std::process::id();
        let started_ms = clock.now_ms();
        for _ in 0..ACQUIRE_ATTEMPTS_MAX {
            let current = site.read().await?;
            let now_ms = clock.now_ms();
            let (epoch, mode) = match &current {
                None => (Epoch(1), PutMode::Create),
                // Our own create or takeover whose answer was lost (a retry after a timeout).
                Some((r, v)) if r.writer_id == writer_id && !r.released => {
                    return Ok(Lease {
                        valid_until_ms: r
                            .expires_ms()
                            .min(now_ms.saturating_add(settings.duration_ms() as i64)),
                        site,
                        clock,
                        settings,
                        record: r.clone(),
                        version: v.clone(),
                    });
                }
                Some((r, _)) if r.is_live_at(now_ms) && !holder_died_here(r, &host) => {
                    return Err(site.held_by(r, now_ms));
                }
                Some((r, v)) => (
                    Epoch(r.epoch.0.saturating_add(1)),
                    PutMode::Update(v.clone()),
                ),
            };
            let record = LeaseRecord {
                writer_id,
                epoch,
                host: host.clone(),
                pid,
                started_ms,
                renewed_ms: now_ms,
                duration_ms: settings.duration_ms(),
                writes: 1,
                released: false,
            };
            let op = if current.is_none() {
                "create"
            } else {
                "take over"
            };
            match site.write(op, &record, mode).await {
                Ok(Ok(version)) => {
                    return Ok(Lease {
                        valid_until_ms: now_ms.saturating_add(settings.duration_ms() as i64),
                        site,
                        clock,
                        settings,
                        record,
                        version,
                    });
                }
                // Lost a race: read again; the winner's lease is live, so that ends in Held.
                Ok(Err(())) => continue,
                // The write may or may not have happened (lost answer): read again, and find
                // out from the writer id.
                Err(LeaseError::Timeout { .. }) => continue,
                Err(e) => return Err(e),
            }
        }
        Err(LeaseError::Contended {
            path: site.path.to_string(),
            attempts: ACQUIRE_ATTEMPTS_MAX,
        })
    }

    /// The fencing generation this writer holds.
    pub fn epoch(&self) -> Epoch {
        self.record.epoch
    }

    /// This writer's id.
    pub fn writer_id(&self) -> WriterId {
        self.record.writer_id
    }

    /// What this writer last wrote into the lease object.
    pub fn record(&self) -> &LeaseRecord {
        &self.record
    }

    /// The lease object's path.
    pub fn path(&self) -> &Path {
        &self.site.path
    }

    /// Until when (this writer's clock, ms since the Unix epoch) no one else can take the
    /// lease. Past it, without a successful renewal, this writer must stop acknowledging.
    pub fn valid_until_ms(&self) -> i64 {
        self.valid_until_ms
    }

    /// True while the lease is this writer's by its own clock.
    pub fn is_valid(&self) -> bool {
        self.clock.now_ms() < self.valid_until_ms
    }

    /// Renews the lease: a conditional update on the version this writer last wrote.
    ///
    /// - `Ok`: the lease is extended; [`Lease::valid_until_ms`] moves to the clock reading
    ///   before this write plus the duration.
    /// - [`LeaseError::Fenced`]: someone else took over (or the object was deleted): stop
    ///   writing at once. The lease is gone for good.
    /// - [`LeaseError::Store`] / [`LeaseError::Timeout`]: not renewed, but not lost either
    ///   while [`Lease::is_valid`]; try again.
    pub async fn renew(&mut self) -> Result<(), LeaseError> {
        let sent_ms = self.clock.now_ms();
        let mut next = self.record.clone();
        next.renewed_ms = sent_ms;
        next.writes = next.writes.saturating_add(1);
        next.duration_ms = self.settings.duration_ms();
        self.write_next(next, "renew", sent_ms).await
    }

    /// Gives the lease up on a clean shutdown: rewrites it as `released` (conditional on the
    /// version last written), so the next broker takes it at once, with the epoch +1. It is
    /// not deleted: the epoch must never go back. On `Err` the lease simply expires after its
    /// duration.
    pub async fn release(mut self) -> Result<(), LeaseError> {
        let sent_ms = self.clock.now_ms();
        let mut next = self.record.clone();
        next.renewed_ms = sent_ms;
        next.writes = next.writes.saturating_add(1);
        next.released = true;
        self.write_next(next, "release", sent_ms).await
    }

    async fn write_next(
        &mut self,
        next: LeaseRecord,
        op: &'static str,
        sent_ms: i64,
    ) -> Result<(), LeaseError> {
        let mode = PutMode::Update(self.version.clone());
        let version = match self.site.write(op, &next, mode).await? {
            Ok(version) => version,
            Err(()) => {
                // Changed under us: a takeover, or our own earlier write whose answer was
                // lost. The writer id and epoch tell which.
                match self.site.read().await? {
                    Some((r, v)) if r.writer_id == self.record.writer_id && !r.released => {
                        self.version = v.clone();
                        match self.site.write(op, &next, PutMode::Update(v)).await? {
                            Ok(version) => version,
                            Err(()) => {
                                let now = self.site.read().await?;
                                return Err(self.site.fenced(now.as_ref().map(|(r, _)| r)));
                            }
                        }
                    }
                    now => return Err(self.site.fenced(now.as_ref().map(|(r, _)| r))),
                }
            }
        };
        self.record = next;
        self.version = version;
        self.valid_until_ms = if self.record.released {
            sent_ms
        } else {
            sent_ms.saturating_add(self.settings.duration_ms() as i64)
        };
        Ok(())
    }

    /// Hands the lease to a background task that renews it every
    /// [`LeaseSettings::renew_interval`] and reports through a watch channel. Needs a tokio
    /// runtime with the time driver.
    pub fn keep(self) -> LeaseKeeper {
        let (status_tx, status_rx) = watch::channel(LeaseStatus::Held {
            epoch: self.epoch(),
            valid_until_ms: self.valid_until_ms,
            renew_error: None,
        });
        let (stop_tx, stop_rx) = watch::channel(Stop::Run);
        let clock = Arc::clone(&self.clock);
        let epoch = self.epoch();
        let task = tokio::spawn(keep_renewing(self, status_tx, stop_rx));
        LeaseKeeper {
            status: status_rx,
            stop: stop_tx,
            task: Some(task),
            clock,
            epoch,
        }
    }
}

impl LeaseSettings {
    fn duration_ms(&self) -> u64 {
        self.duration.as_millis() as u64
    }
}

/// What the keeper reports on its watch channel.
#[derive(Debug, Clone)]
pub enum LeaseStatus {
    /// Held until `valid_until_ms` (holder's clock) unless renewed again. `renew_error` is the
    /// last renewal's error while renewals fail; `None` after a success. A `valid_until_ms` in
    /// the past means the lease *lapsed*: nobody may write, renewals go on, and one that
    /// succeeds makes it writable again at the same epoch (a conditional renewal can only
    /// succeed if no other broker took the lease meanwhile).
    Held {
        epoch: Epoch,
        valid_until_ms: i64,
        renew_error: Option<Arc<LeaseError>>,
    },
    /// Lost for good: [`LeaseError::Fenced`] (or the error of a failed release). Stop writing; only a new [`Lease::acquire`], at a new epoch, may write.
    Lost(Arc<LeaseError>),
    /// Released on a clean shutdown.
    Released,
}

/// What the keeper's owner asks of its task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stop {
    Run,
    /// Stop renewing; leave the lease to expire.
    Abandon,
    /// Stop renewing and release the lease.
    Release,
}

/// Renews a [`Lease`] in the background (from [`Lease::keep`]). Dropping it stops the
/// renewals (the lease then expires after its duration); [`LeaseKeeper::shutdown`] releases it.
pub struct LeaseKeeper {
    status: watch::Receiver<LeaseStatus>,
    stop: watch::Sender<Stop>,
    task: Option<tokio::task::JoinHandle<Result<(), Arc<LeaseError>>>>,
    clock: Arc<dyn LeaseClock>,
    epoch: Epoch,
}

impl fmt::Debug for LeaseKeeper {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaseKeeper")
            .field("epoch", &self.epoch)
            .field("status", &*self.status.borrow())
            .finish_non_exhaustive()
    }
}

impl LeaseKeeper {
    /// A receiver of the lease's status; it changes after every renewal attempt and when the
    /// lease is lost.
    pub fn status(&self) -> watch::Receiver<LeaseStatus> {
        self.status.clone()
    }

    /// The fencing generation held.
    pub fn epoch(&self) -> Epoch {
        self.epoch
    }

    /// The epoch to write with if this writer may still acknowledge writes now: the lease is
    /// not lost and its validity has not run out by the clock. `None` means stop acking.
    pub fn writable_epoch(&self) -> Option<Epoch> {
        match &*self.status.borrow() {
            LeaseStatus::Held {
                epoch,
                valid_until_ms,
                ..
            } if self.clock.now_ms() < *valid_until_ms => Some(*epoch),
            _ => None,
        }
    }

    /// Stops the renewals and releases the lease (clean shutdown). Returns the release's
    /// error, or the error that lost the lease earlier (then there is nothing to release).
    pub async fn shutdown(mut self) -> Result<(), Arc<LeaseError>> {
        let _ = self.stop.send(Stop::Release);
        match self.task.take() {
            Some(task) => match task.await {
                Ok(result) => result,
                // The task has no panics of its own; report one (or a cancelled runtime) as is.
                Err(e) => Err(Arc::new(LeaseError::Task(e.to_string()))),
            },
            None => Ok(()),
        }
    }
}

impl Drop for LeaseKeeper {
    fn drop(&mut self) {
        // Abandon, do not abort: a renewal in flight finishes and the task exits at once
        // after; the lease then expires on its own.
        let _ = self.stop.send(Stop::Abandon);
    }
}

/// How often a lapsed lease (validity run out while renewals failed) is tried again.
pub const LAPSED_RETRY_INTERVAL: Duration = Duration::from_secs(1);

/// The keeper's task: renew every interval; on `Fenced` report and stop; on other errors keep
/// trying. Past the validity the lease has *lapsed*: it is reported `Held` with a
/// `valid_until_ms` in the past (not writable), and tried every [`LAPSED_RETRY_INTERVAL`]
/// until a renewal succeeds (writable again, same epoch) or finds it taken (`Fenced`).
async fn keep_renewing(
    mut lease: Lease,
    status: watch::Sender<LeaseStatus>,
    mut stop: watch::Receiver<Stop>,
) -> Result<(), Arc<LeaseError>> {
    let interval = lease.settings.renew_interval;
    let mut last_error: Option<Arc<LeaseError>> = None;
    let mut lapsed = false;
    let lost = |status: &watch::Sender<LeaseStatus>, e: Arc<LeaseError>| {
        let _ = status.send(LeaseStatus::Lost(Arc::clone(&e)));
        Err(e)
    };
    loop {
        // Wake at the next renewal, or when the validity runs out if that is sooner.
        let left_ms = lease.valid_until_ms - lease.clock.now_ms();
        let wait = if left_ms > 0 {
            interval.min(Duration::from_millis(left_ms as u64))
        } else if lapsed {
            interval.min(LAPSED_RETRY_INTERVAL)
        } else {
            Duration::ZERO
        };
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            changed = stop.changed() => {
                let what = if changed.is_ok() { *stop.borrow() } else { Stop::Abandon };
                if what != Stop::Release {
                    return Ok(());
                }
                return match lease.release().await {
                    Ok(()) => {
                        let _ = status.send(LeaseStatus::Released);
                        Ok(())
                    }
                    Err(e) => lost(&status, Arc::new(e)),
                };
            }
        }
        if !lease.is_valid() && !lapsed {
            // Nobody may write now; renewals go on, and the first that succeeds proves that
            // no other broker took the lease in between (it is conditional on the version
            // this writer last wrote), so writing resumes at the same epoch.
            lapsed = true;
            let _ = status.send(LeaseStatus::Held {
                epoch: lease.epoch(),
                valid_until_ms: lease.valid_until_ms,
                renew_error: last_error.clone(),
            });
        }
        match lease.renew().await {
            Ok(()) => {
                last_error = None;
                lapsed = false;
                let _ = status.send(LeaseStatus::Held {
                    epoch: lease.epoch(),
                    valid_until_ms: lease.valid_until_ms,
                    renew_error: None,
                });
            }
            Err(e @ LeaseError::Fenced { .. }) => return lost(&status, Arc::new(e)),
            Err(e) => {
                let e = Arc::new(e);
                last_error = Some(Arc::clone(&e));
                let _ = status.send(LeaseStatus::Held {
                    epoch: lease.epoch(),
                    valid_until_ms: lease.valid_until_ms,
                    renew_error: Some(e),
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicI64, Ordering};

    use object_store::memory::InMemory;

    fn record() -> LeaseRecord {
        LeaseRecord {
            writer_id: WriterId(0x0123_4567_89ab_cdef_0011_2233_4455_6677),
            epoch: Epoch(3),
            host: "broker-1".into(),
            pid: 4242,
            started_ms: 1_764_000_000_000,
            renewed_ms: 1_764_000_003_000,
            duration_ms: 10_000,
            writes: 2,
            released: false,
        }
    }

    #[test]
    fn record_round_trips_and_reads_as_text() {
        let r = record();
        let text = r.encode();
        assert!(text.starts_with("sluice writer lease v1\nwriter_id: 0123456789abcdef"));
        assert!(text.contains("\nstate: held\n"));
        assert_eq!(LeaseRecord::decode(text.as_bytes()).unwrap(), r);
        let released = LeaseRecord {
            released: true,
            ..r
        };
        assert_eq!(
            LeaseRecord::decode(released.encode().as_bytes()).unwrap(),
            released
        );
    }

    #[test]
    fn decode_ignores_unknown_keys_and_rejects_bad_input() {
        let good = record().encode();
        let newer = format!("{good}zone: eu-1\n");
        assert_eq!(LeaseRecord::decode(newer.as_bytes()).unwrap(), record());

        let cases: Vec<(String, &str)> = vec![
            (String::new(), "empty"),
            ("hello\n".into(), "first line"),
            (good.replace("epoch: 3", "epoch: -3"), "epoch"),
            (good.replace("pid: 4242\n", ""), "pid is missing"),
            (format!("{good}pid: 1\n"), "twice"),
            (good.replace("state: held", "state: maybe"), "state"),
            (good.replace("writer_id: 0", "writer_id: g"), "writer_id"),
            (good.replace("writer_id: 0", "writer_id: "), "writer_id"),
            (good.replace("host: broker-1", "host"), "key: value"),
        ];
        for (body, want) in cases {
            let err = LeaseRecord::decode(body.as_bytes()).unwrap_err();
            assert!(err.contains(want), "{body:?}: {err}");
        }
        assert!(
            LeaseRecord::decode(&[0xff, 0xfe])
                .unwrap_err()
                .contains("UTF-8")
        );
    }

    #[test]
    fn liveness_is_by_the_holders_duration() {
        let r = record();
        assert!(r.is_live_at(r.renewed_ms));
        assert!(r.is_live_at(r.renewed_ms + 9_999));
        assert!(!r.is_live_at(r.renewed_ms + 10_000));
        // Renewed "in the future" by a skewed clock: live.
        assert!(r.is_live_at(r.renewed_ms - 60_000));
        let released = LeaseRecord {
            released: true,
            ..r
        };
        assert!(!released.is_live_at(released.renewed_ms));
    }

    #[test]
    fn host_names_stay_on_one_line() {
        assert_eq!(clean_host("a\nb\r"), "a?b");
        assert_eq!(clean_host("  "), "unknown-host");
        assert_eq!(clean_host(&"h".repeat(400)).len(), HOST_CHARS_MAX);
        assert!(!this_host().contains('\n'));
    }

    #[test]
    fn settings_are_checked() {
        LeaseSettings::default().validate().unwrap();
        let too_slow = LeaseSettings {
            renew_interval: Duration::from_secs(6),
            ..LeaseSettings::default()
        };
        let err = too_slow.validate().unwrap_err().to_string();
        assert!(err.contains("at most half"), "{err}");
        let long_ops = LeaseSettings {
            op_timeout: Duration::from_secs(4),
            ..LeaseSettings::default()
        };
        assert!(long_ops.validate().is_err());
    }

    #[test]
    fn messages_name_the_holder_and_what_to_do() {
        let held = LeaseError::Held {
            prefix: "prefix events".into(),
            host: "h1".into(),
            pid: 7,
            writer_id: WriterId(1),
            epoch: Epoch(2),
            renewed_ago_ms: 2_400,
        };
        assert_eq!(
            held.to_string(),
            "another broker (host h1, pid 7, renewed 2 s ago) writes to prefix events; stop it \
             or use another prefix"
        );
        assert!(held.is_other_writer());
    }

    /// The lease logic on the in-memory store, which also implements conditional updates;
    /// the same cases against MinIO are in `tests/lease_minio.rs`.
    #[tokio::test]
    async fn a_live_lease_of_a_dead_process_on_this_host_is_taken_over_at_once() {
        let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let clock: Arc<dyn LeaseClock> = Arc::new(|| 1_000_000);
        let prefix = Path::from("p");
        let settings = LeaseSettings::default();
        // A process that has exited: its pid names nobody (until reused, which is rare).
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead_pid = child.id();
        child.wait().unwrap();
        // A killed process not yet reaped (a zombie) is dead too.
        let mut zombie = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        zombie.kill().unwrap();
        std::thread::sleep(Duration::from_millis(100));
        assert!(!process_runs(zombie.id()));
        assert!(process_runs(std::process::id()));
        zombie.wait().unwrap();
        let mut dead = record();
        dead.host = this_host();
        dead.pid = dead_pid;
        dead.epoch = Epoch(4);
        dead.renewed_ms = 999_000;
        store
            .put(
                &lease_path(&prefix),
                PutPayload::from(dead.encode().into_bytes()),
            )
            .await
            .unwrap();
        let lease = Lease::acquire(Arc::clone(&store), &prefix, Arc::clone(&clock), settings)
            .await
            .unwrap();
        assert_eq!(lease.epoch(), Epoch(5));

        // The same record from another host, or from a live process here, is still held.
        for (host, pid) in [("elsewhere".to_owned(), dead_pid), (this_host(), 1)] {
            let mut live = dead.clone();
            live.host = host;
            live.pid = pid;
            let other = Path::from(format!("q{pid}"));
            store
                .put(
                    &lease_path(&other),
                    PutPayload::from(live.encode().into_bytes()),
                )
                .await
                .unwrap();
            let err = Lease::acquire(Arc::clone(&store), &other, Arc::clone(&clock), settings)
                .await
                .unwrap_err();
            assert!(err.is_other_writer(), "{err}");
        }
    }

    #[tokio::test]
    async fn acquire_hold_take_over_fence_release_in_memory() {
        let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let now = Arc::new(AtomicI64::new(1_000_000));
        let clock: Arc<dyn LeaseClock> = {
            let now = Arc::clone(&now);
            Arc::new(move || now.load(Ordering::SeqCst))
        };
        let prefix = Path::from("p");
        let settings = LeaseSettings::default();
        let acquire = || Lease::acquire(Arc::clone(&store), &prefix, Arc::clone(&clock), settings);

        let mut first = acquire().await.unwrap();
        assert_eq!(first.epoch(), Epoch(1));
        now.fetch_add(9_000, Ordering::SeqCst);
        let err = acquire().await.unwrap_err();
        assert!(matches!(err, LeaseError::Held { .. }), "{err}");
        first.renew().await.unwrap();
        now.fetch_add(9_000, Ordering::SeqCst);
        assert!(first.is_valid());
        assert!(acquire().await.unwrap_err().is_other_writer());

        now.fetch_add(1_000, Ordering::SeqCst);
        assert!(!first.is_valid());
        let second = acquire().await.unwrap();
        assert_eq!(second.epoch(), Epoch(2));
        let err = first.renew().await.unwrap_err();
        assert!(matches!(err, LeaseError::Fenced { .. }), "{err}");

        second.release().await.unwrap();
        let mut third = acquire().await.unwrap();
        assert_eq!(third.epoch(), Epoch(3));

        // A renewal whose answer was lost: the object holds this writer's newer record, the
        // writer still has the old version. Its next renewal recognises the write as its own.
        let mut landed = third.record().clone();
        landed.writes += 1;
        landed.renewed_ms += 1;
        store
            .put_opts(
                third.path(),
                PutPayload::from(landed.encode().into_bytes()),
                PutMode::Update(third.version.clone()).into(),
            )
            .await
            .unwrap();
        third.renew().await.unwrap();
        assert_eq!(third.epoch(), Epoch(3));
        assert!(third.is_valid());
    }
}
