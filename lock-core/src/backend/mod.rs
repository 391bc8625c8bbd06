//! The seam between the lock logic (request, lease, watchdog, waiting) and
//! the store that holds the leases. One module per backend:
//!
//! - [`redis`]: Redis, one implementation generic over the connection, with
//!   three topologies: a single server (or primary), through a reconnecting
//!   `ConnectionManager`; Redis Sentinel (feature `sentinel`), which follows
//!   the primary across failovers; and Redis Cluster (feature `cluster`),
//!   whose sharded pub/sub lives in `redis/sharded.rs`. The `gate` beside
//!   them reads each server's identity (restarts, eviction policy). Beside
//!   them too, `redis/redlock/`: N independent servers, by majority, each
//!   one a single-server backend;
//! - [`memory`]: the embedded in-process store with the same semantics;
//! - `faulty` (feature `testing`): the in-memory store behind the controls
//!   of `leasehold::testing` (steal, expire, unavailable, slow).
//!
//! Beside them: [`connect`] (connection settings, URL parsing and
//! redaction, TLS, error conversion), [`scripts`] (one typed function per
//! Lua script), [`listener`] (the pub/sub task that hears releases),
//! [`wakeups`] (each client's local register of waiters, which releases
//! wake) and [`glob`] (Redis-style patterns for `list` in memory).
//!
//! A backend only knows Redis keys and owner tokens; reentrancy, validity,
//! renewal scheduling and the waiting policy live above it and are shared by
//! all.
//!
//! # Data layout
//!
//! The Redis names of one lock are listed in the crate's front page (the
//! "Data layout" table in `lib.rs`); [`LockKeys`] builds them.

pub(crate) mod connect;
#[cfg(feature = "testing")]
pub(crate) mod faulty;
pub(crate) mod glob;
pub(crate) mod keys;
pub(crate) mod lazy;
pub(crate) mod listener;
pub(crate) mod memory;
pub(crate) mod redis;
pub(crate) mod scripts;
pub(crate) mod target;
pub(crate) mod wakeups;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use crate::error::{LockError, LostCause};
pub(crate) use keys::{LockKeys, SCAN_COUNT, key_of_lock_name, lock_glob, shown_key};
use wakeups::Wakeups;

/// How long a fencing counter outlives the last acquisition of its lock
/// (beyond the lease). A counter forgotten after this long restarts from the
/// server's clock in microseconds, which keeps tokens increasing unless the
/// clock steps back by more than this; lock names that are no longer used
/// leave no key behind.
pub(crate) const FENCE_MEMORY: Duration = Duration::from_secs(3600);

/// How long after its grant a lease that the fast path did not write down
/// has its fencing token recorded (if it is still held): the locks given
/// back sooner, most of them, never pay for the record.
pub(crate) const RECORD_AFTER: Duration = Duration::from_millis(20);

/// How much longer than its expected sleep a waiter's place in line is kept:
/// a waiter that has not come back by then (crashed) loses its place, and
/// the lock is no longer kept for it.
pub(crate) const PLACE_GRACE: Duration = Duration::from_secs(2);

/// How long a waiter's place in line lives unless its client keeps it
/// (`keep_place.lua`, every third of it while the waiter sleeps), and the
/// longest lease a release hands to a waiter, extended by its client when
/// it hears of the grant: a waiter whose process died or froze holds the
/// line up for at most about this long, whatever the lock's TTL. This is
/// the default; a client's own is [`Backend::place_life`].
pub(crate) const PLACE_LIFE: Duration = crate::limits::DEFAULT_PLACE_LIFE;

/// A boxed, `Send` future: backends are used as `dyn Backend`.
pub(crate) type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What a backend operation answers, later.
pub(crate) type Reply<'a, T> = BoxFuture<'a, Result<T, LockError>>;

/// One acquisition attempt, as a backend sees it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Attempt<'a> {
    pub(crate) keys: &'a LockKeys,
    /// The acquisition's owner token.
    pub(crate) token: &'a str,
    /// The lease asked for.
    pub(crate) ttl: Duration,
    /// Keep (or take) a place in the lock's line if it is busy.
    pub(crate) in_line: bool,
    /// The least fencing token a fresh acquisition may issue (`None`: the
    /// server clock in µs). Redlock sends its own clock to every node.
    pub(crate) fence_floor: Option<u64>,
    /// The first attempt of an acquisition, which may take the fast path
    /// (a free lock nobody waits for, see `scripts/fast.rs`); later ones
    /// know the lock is contended and go straight to the script.
    pub(crate) fast: bool,
    /// A later attempt of an acquisition whose first one may have taken the
    /// fast path: the script goes in claimed mode, so that a fast key of
    /// this token is never taken for a grant (a failover that lost the
    /// claimed call's delete brings such a key back; the protocol model's
    /// `fast_path_failover` check found it).
    pub(crate) after_fast: bool,
    /// This attempt's name for a release that hands the lock on (in line
    /// only): when it was sent, in µs since its waiter started. A grant
    /// names the attempt its place was last written by (`grant:` in
    /// `wakeups.rs`), so the waiter counts its lease from that sending.
    pub(crate) sent_us: u64,
}

impl<'a> Attempt<'a> {
    /// Keys, token, TTL, in line.
    pub(crate) fn parts(self) -> (&'a LockKeys, &'a str, Duration, bool) {
        (self.keys, self.token, self.ttl, self.in_line)
    }
}

/// A release of a held lease, as a backend sees it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Release<'a> {
    pub(crate) keys: &'a LockKeys,
    /// The holder's owner token.
    pub(crate) token: &'a str,
    /// Zero: delete now; otherwise let the key expire after this long
    /// (`at_least`).
    pub(crate) keep: Duration,
    /// Retry while the server asks to, until then (the lease's validity).
    pub(crate) deadline: Instant,
    /// When the lease's winning attempt was sent: a lease granted before
    /// the server's last change (a restart, a failover) and released after
    /// it shows that its key's state survived that change (gate.rs).
    pub(crate) granted_at: Instant,
}

impl<'a> Release<'a> {
    /// Keys, token, keep, deadline.
    pub(crate) fn parts(self) -> (&'a LockKeys, &'a str, Duration, Instant) {
        (self.keys, self.token, self.keep, self.deadline)
    }
}

/// What one acquisition attempt found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Acquired {
    /// The lock is ours, with this fencing token.
    Yes { fence: u64 },
    /// Someone else holds it; their lease runs out in `expires_in` (`None`: no expiry set).
    Busy { expires_in: Option<Duration> },
}

/// The outcome of renewing (or extending, or releasing) one lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Owned {
    /// It was ours, and the operation was applied.
    Yes,
    /// It is not ours any more (expired, or another owner's).
    No,
    /// The lock key holds a value of another type.
    WrongType,
    /// It is not ours any more because an operator released it
    /// (`force_release`; renew.lua's -2).
    ForceReleased,
}

impl Owned {
    pub(crate) fn from_code(code: i64) -> Owned {
        match code {
            1.. => Owned::Yes,
            -1 => Owned::WrongType,
            -2 => Owned::ForceReleased,
            _ => Owned::No,
        }
    }

    /// `Ok(())` when owned, else the precise error for this lock.
    pub(crate) fn into_result(self, keys: &LockKeys) -> Result<(), LockError> {
        match self {
            Owned::Yes => Ok(()),
            Owned::No | Owned::ForceReleased => Err(LockError::NotHeld {
                key: keys.key().to_owned(),
            }),
            Owned::WrongType => Err(LockError::WrongType {
                key: keys.key().to_owned(),
                redis_key: keys.lock().to_owned(),
            }),
        }
    }
}

/// One lease in a renewal batch.
#[derive(Debug, Clone)]
pub(crate) struct Renewal {
    /// The lease's id in this process (for the watchdog's bookkeeping).
    pub(crate) lease_id: u64,
    pub(crate) keys: Arc<LockKeys>,
    pub(crate) token: Arc<str>,
    /// The new lease, counted from now; zero: only check that the lease is
    /// still ours, leaving its expiry as it is (an audit of a lease without
    /// renewal).
    pub(crate) ttl: Duration,
    /// The lease's fencing token, to be recorded for `inspect` (once, a
    /// moment after a grant on a backend that records lazily; see
    /// [`Backend::records_lazily`]), and the lease's length (the record
    /// outlives it).
    pub(crate) record: Option<(u64, Duration)>,
}

/// One held lock as the store sees it (see `LockInfo`, built from it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Inspected {
    /// The key as the user gave it (without prefix).
    pub(crate) key: String,
    /// The holder's owner token (`<32 hex>:<client name>`).
    pub(crate) token: String,
    /// The lease left.
    pub(crate) ttl: Duration,
    /// The fencing counter: the holder's fencing token.
    pub(crate) fence: u64,
    /// Waiters whose places in line are kept.
    pub(crate) waiters: usize,
    /// A semaphore's or rw lock's holders (empty for a lock).
    pub(crate) shared: Vec<SharedHolder>,
}

/// One holder of a semaphore or rw lock, as the store sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SharedHolder {
    pub(crate) token: String,
    /// `s` (permit), `r` (read share) or `w` (writer).
    pub(crate) letter: char,
    pub(crate) ttl: Duration,
    pub(crate) fence: u64,
}

impl Inspected {
    /// A semaphore or rw lock with these `holders` (`None` without any):
    /// the lock-like fields show the latest grant (highest fence).
    pub(crate) fn of_family(
        key: &str,
        holders: Vec<SharedHolder>,
        waiters: usize,
    ) -> Option<Inspected> {
        let latest = holders.iter().max_by_key(|h| h.fence)?.clone();
        Some(Inspected {
            key: key.to_owned(),
            token: latest.token,
            ttl: latest.ttl,
            fence: latest.fence,
            waiters,
            shared: holders,
        })
    }
}

/// This machine's clock in µs since the Unix epoch (at least 1): the floor
/// of a new fencing token where no Redis server's clock is asked (Redlock
/// sends it to every node; the in-memory backend uses it as Redis uses
/// `TIME`).
pub(crate) fn clock_micros() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
        .max(1)
}

/// One lock found by `list`: a key that matches but is not a leasehold
/// lock (a value of another type, a string that is no owner token, a stray
/// fence or line key) is left out, and logged, instead of failing the whole
/// listing; `inspect` of that key reports it (`WrongType`).
pub(crate) fn listed(
    found: Result<Option<Inspected>, LockError>,
) -> Result<Option<Inspected>, LockError> {
    match found {
        Err(LockError::WrongType { key, redis_key }) => {
            tracing::warn!(%key, %redis_key, "leasehold: list skips a key that is not a leasehold lock");
            Ok(None)
        }
        other => other,
    }
}

/// A server that may have lost data: the leases held there must be checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ServerChange {
    /// Counts the changes seen so far.
    pub(crate) generation: u64,
    /// What the leases found gone there are lost to.
    pub(crate) cause: LostCause,
}

impl Default for ServerChange {
    fn default() -> Self {
        ServerChange {
            generation: 0,
            cause: LostCause::Restarted,
        }
    }
}

/// A store of leases. Every method is one atomic, owner-checked operation,
/// safe to retry after a lost reply.
pub(crate) trait Backend: Send + Sync + 'static {
    /// Take the lock for `ttl` if it is free and nobody waits in line before
    /// us (or it is already ours with this token). With `in_line`, a busy
    /// reply keeps (or takes) the caller's place in the lock's line.
    fn acquire<'a>(&'a self, attempt: Attempt<'a>) -> Reply<'a, Acquired>;

    /// The acquisition `token` is given up (its wait ran out, it failed, or
    /// its future was dropped): remove its lock if an attempt got it, and its
    /// place in line, telling the next waiter if the lock is free. Best
    /// effort: what cannot be removed lapses by itself.
    fn abandon<'a>(&'a self, keys: &'a LockKeys, token: &'a str) -> BoxFuture<'a, ()>;

    /// Give the lock back if it is ours: delete it and notify waiters, or with
    /// a non-zero `keep`, leave it (still ours) to expire after `keep`, and
    /// tell waiters when that is.
    ///
    /// A release the server asks to retry (a reconnect, `TRYAGAIN` while a
    /// slot migrates) is retried until it lands or `deadline` passes.
    fn release<'a>(&'a self, release: Release<'a>) -> Reply<'a, Owned>;

    /// Reset the expiry of each lease that is still ours to its `ttl`, in as
    /// few round trips as the backend allows. One result per item, in order.
    fn renew<'a>(&'a self, batch: &'a [Renewal]) -> Reply<'a, Vec<Owned>>;

    /// Make sure release announcements for this lock reach
    /// [`Backend::wakeups`] (subscribe if this is the first waiter).
    /// Resolves once they will. Every call is matched by one
    /// [`Backend::unlisten`], also when the future is dropped unfinished.
    fn listen<'a>(&'a self, keys: &'a LockKeys) -> Reply<'a, ()>;

    /// One waiter fewer listens for this lock.
    fn unlisten(&self, keys: &LockKeys);

    /// Wait until the writes made so far (the acquisition just made) reached
    /// `replicas` replicas, or `timeout` passed. Returns how many acknowledged.
    fn sync_replicas<'a>(
        &'a self,
        _keys: &'a LockKeys,
        _replicas: usize,
        _timeout: Duration,
    ) -> Reply<'a, usize> {
        let backend = self.describe();
        Box::pin(async move {
            Err(LockError::invalid(
                "replica_sync",
                format!("replica sync is not available on {backend}"),
            ))
        })
    }

    /// The lock as it is now, read in one atomic step; `None` when free.
    fn inspect<'a>(&'a self, _keys: &'a LockKeys) -> Reply<'a, Option<Inspected>> {
        let backend = self.describe();
        Box::pin(async move { Err(not_available("inspect", &backend)) })
    }

    /// Every held lock under `prefix` whose key matches the glob `pattern`
    /// (Redis glob syntax), found by `SCAN` (never `KEYS`), in no order.
    fn list<'a>(&'a self, _prefix: &'a str, _pattern: &'a str) -> Reply<'a, Vec<Inspected>> {
        let backend = self.describe();
        Box::pin(async move { Err(not_available("list", &backend)) })
    }

    /// An operator's release: delete the lock whoever holds it, wake the
    /// next waiter, and make the old holder's next renewal answer
    /// [`Owned::ForceReleased`]. Returns whether it was held.
    fn force_release<'a>(&'a self, _keys: &'a LockKeys) -> Reply<'a, bool> {
        let backend = self.describe();
        Box::pin(async move { Err(not_available("force_release", &backend)) })
    }

    /// This client's local register of waiters, keyed by release channel.
    fn wakeups(&self) -> &Wakeups;

    /// Whether a lock that a release handed to the waiting `keys` (a
    /// `grant:` announcement, see `wakeups.rs`) may be taken as granted
    /// now: the rules an attempt's grant goes through (the server's
    /// identity read after a new connection, a key closed after a restart
    /// or failover: see `redis/gate.rs`). An error (unavailable, with the
    /// time left) if not. Backends that never hand a lock on admit it.
    fn admit_grant<'a>(&'a self, _keys: &'a LockKeys, _ttl: Duration) -> Reply<'a, ()> {
        Box::pin(async { Ok(()) })
    }

    /// How long a waiter's place lives unless its client keeps it, and the
    /// longest lease a release hands a waiter (the builder's `place_life`;
    /// [`PLACE_LIFE`] by default).
    fn place_life(&self) -> Duration;

    /// Keep `token`'s place in the line of `keys` for
    /// [`place_life`](Self::place_life) from now (while its waiter sleeps), and say how long the lock's lease
    /// has left. `Ok(None)`: the waiter looks again now (its place is gone:
    /// it lapsed, or a release handed it the lock; or the lock is free).
    /// Backends that keep no line in the store have nothing to keep.
    fn keep_place<'a>(
        &'a self,
        _keys: &'a LockKeys,
        _token: &'a str,
    ) -> Reply<'a, Option<Duration>> {
        Box::pin(async { Ok(Some(Duration::MAX)) })
    }

    /// A waiter with a lease of `ttl` stands in the line of `keys` now
    /// (`stands`), or no more: for the restart gate, it asks for the keys
    /// all the while (see `redis/gate`). Called on the slow path only, when
    /// an attempt was first told busy in line, and when the waiter ends.
    fn stand_in_line(&self, _keys: &LockKeys, _ttl: Duration, _stands: bool) {}

    /// Whether waiters' places live in the store and must be kept alive
    /// ([`keep_place`](Self::keep_place)); a backend without a line (in
    /// memory, Redlock) spares its sleeping waiters the keep-alive.
    fn keeps_places(&self) -> bool {
        false
    }

    /// Whether a busy reply to a one-try attempt may leave a grant behind
    /// (to be abandoned when the acquisition ends).
    fn busy_leaves_traces(&self) -> bool {
        false
    }

    /// Whether grants may leave the fencing token unwritten (the fast path),
    /// so that a lease held past [`RECORD_AFTER`] has it recorded through
    /// the watchdog (a renewal carrying `record`), for `inspect`.
    fn records_lazily(&self) -> bool {
        false
    }

    /// Announcements that the server lost data (restarted, failed over), so
    /// that leases held there are checked at once. `None`: it never does.
    fn changes(&self) -> Option<watch::Receiver<ServerChange>> {
        None
    }

    /// The margin subtracted from a lease to allow for clock drift between
    /// this process and the server(s).
    fn drift(&self, ttl: Duration) -> Duration {
        default_drift(ttl)
    }

    /// The server(s), credentials redacted, for messages and `Debug`.
    fn describe(&self) -> String;
}

/// The clock drift allowed for a lease of `ttl`: ttl/100 + 2 ms.
pub(crate) fn default_drift(ttl: Duration) -> Duration {
    ttl / 100 + Duration::from_millis(2)
}

/// The error of an operation a backend does not offer.
fn not_available(operation: &'static str, backend: &str) -> LockError {
    LockError::invalid(
        operation,
        format!("{operation} is not available on {backend}"),
    )
}

/// Run `abandon` for `token` in the background, at once (from `Drop`, and
/// when an acquisition gives up). Without a runtime the traces lapse.
pub(crate) fn abandon_in_background(backend: &Arc<dyn Backend>, keys: &LockKeys, token: &str) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    let (backend, keys, token) = (backend.clone(), keys.clone(), token.to_owned());
    runtime.spawn(async move { backend.abandon(&keys, &token).await });
}
