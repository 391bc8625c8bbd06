//! The seam between the lock logic (request, guard, watchdog, waiting) and the
//! store that holds the leases. One file per backend:
//!
//! - [`redis`]: one Redis server (or a primary), through a reconnecting
//!   `ConnectionManager` and the Lua scripts of [`crate::scripts`];
//! - [`memory`]: the embedded in-process store with the same semantics.
//!
//! A backend only knows Redis keys and owner tokens; reentrancy, validity,
//! renewal scheduling and waiting policy live above it and are shared by all.
//!
//! # Data layout
//!
//! A lock named `K` under the prefix `P` (default `leasehold:`) uses:
//!
//! | Redis name | type | content |
//! | --- | --- | --- |
//! | `P{K}:lock` | string, with expiry | the holder's owner token (32 hex chars); its TTL is the lease |
//! | `P{K}:fence` | string (integer), with expiry | the fencing counter, `INCR`ed once per acquisition; forgotten [`FENCE_MEMORY`] after the last one, and restarted from the server clock (µs) |
//! | `P{K}:queue` | list, with expiry | the line: owner tokens of waiters, first come first served |
//! | `P{K}:waiting` | hash, with expiry | each waiter's token → until when (server ms) its place is kept |
//! | `P{K}:released` | pub/sub channel | on each release, `next:<token>` (the first in line) or `free:<token>` (`SPUBLISH` on Cluster) |
//!
//! The braces make `K` the hash tag, so all three live in one cluster slot.

#[cfg(feature = "cluster")]
pub(crate) mod cluster;
pub(crate) mod memory;
pub(crate) mod redis;
pub(crate) mod redlock;
pub(crate) mod subscriber;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use crate::error::LockError;
use crate::waiting::WaitList;

/// How long a fencing counter outlives the last acquisition of its lock
/// (beyond the lease). A counter forgotten after this long restarts from the
/// server's clock in microseconds, which keeps tokens increasing unless the
/// clock steps back by more than this; lock names that are no longer used
/// leave no key behind.
pub(crate) const FENCE_MEMORY: Duration = Duration::from_secs(3600);

/// How much longer than its expected sleep a waiter's place in line is kept:
/// a waiter that has not come back by then (crashed) loses its place, and
/// the lock is no longer kept for it.
pub(crate) const PLACE_GRACE: Duration = Duration::from_secs(2);

/// A boxed, `Send` future: backends are used as `dyn Backend`.
pub(crate) type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The Redis names of one lock (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LockKeys {
    /// The key as the user gave it, for error messages.
    pub(crate) name: String,
    pub(crate) lock: String,
    pub(crate) fence: String,
    pub(crate) queue: String,
    pub(crate) places: String,
    pub(crate) channel: String,
}

impl LockKeys {
    pub(crate) fn new(prefix: &str, name: &str) -> LockKeys {
        // On every acquisition: plain pushes, not `format!`.
        let named = |suffix: &str| {
            let mut key = String::with_capacity(prefix.len() + name.len() + 2 + suffix.len());
            key.push_str(prefix);
            key.push('{');
            key.push_str(name);
            key.push('}');
            key.push_str(suffix);
            key
        };
        LockKeys {
            name: name.to_owned(),
            lock: named(":lock"),
            fence: named(":fence"),
            queue: named(":queue"),
            places: named(":waiting"),
            channel: named(":released"),
        }
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
}

impl Owned {
    pub(crate) fn from_code(code: i64) -> Owned {
        match code {
            1.. => Owned::Yes,
            -1 => Owned::WrongType,
            _ => Owned::No,
        }
    }

    /// `Ok(())` when owned, else the precise error for this lock.
    pub(crate) fn into_result(self, keys: &LockKeys) -> Result<(), LockError> {
        match self {
            Owned::Yes => Ok(()),
            Owned::No => Err(LockError::NotHeld {
                key: keys.name.clone(),
            }),
            Owned::WrongType => Err(wrong_type(keys, &keys.lock)),
        }
    }
}

pub(crate) fn wrong_type(keys: &LockKeys, redis_key: &str) -> LockError {
    LockError::WrongType {
        key: keys.name.clone(),
        redis_key: redis_key.to_owned(),
    }
}

/// One lease in a renewal batch.
#[derive(Debug, Clone)]
pub(crate) struct Renewal {
    pub(crate) keys: Arc<LockKeys>,
    pub(crate) token: Arc<str>,
    pub(crate) ttl: Duration,
}

/// A store of leases. Every method is one atomic, owner-checked operation,
/// safe to retry after a lost reply.
pub(crate) trait Backend: Send + Sync + 'static {
    /// Take the lock for `ttl` if it is free and nobody waits in line before
    /// us (or it is already ours with this token). With `in_line`, a busy
    /// reply keeps (or takes) the caller's place in the lock's line.
    fn acquire<'a>(
        &'a self,
        keys: &'a LockKeys,
        token: &'a str,
        ttl: Duration,
        in_line: bool,
    ) -> BoxFuture<'a, Result<Acquired, LockError>>;

    /// The waiter `token` gives up its place in line (and the next one is
    /// told if the lock is free). Backends without a line do nothing.
    fn leave<'a>(&'a self, _keys: &'a LockKeys, _token: &'a str) -> BoxFuture<'a, ()> {
        Box::pin(async {})
    }

    /// Give the lock back if it is ours: delete it and notify waiters, or with
    /// a non-zero `keep`, leave it (still ours) to expire after `keep`.
    fn release<'a>(
        &'a self,
        keys: &'a LockKeys,
        token: &'a str,
        keep: Duration,
    ) -> BoxFuture<'a, Result<Owned, LockError>>;

    /// Reset the expiry of each lease that is still ours to its `ttl`, in as
    /// few round trips as the backend allows. One result per item, in order.
    fn renew<'a>(&'a self, batch: &'a [Renewal]) -> BoxFuture<'a, Result<Vec<Owned>, LockError>>;

    /// Make sure release notifications for this lock reach [`Backend::waiters`]
    /// (subscribe if this is the first waiter). Resolves once they will.
    fn watch<'a>(&'a self, keys: &'a LockKeys) -> BoxFuture<'a, Result<(), LockError>>;

    /// The waiter that called [`Backend::watch`] is gone.
    fn unwatch(&self, keys: &LockKeys);

    /// Wait until the writes made so far (the acquisition just made) reached
    /// `replicas` replicas, or `timeout` passed. Returns how many acknowledged.
    fn sync_replicas<'a>(
        &'a self,
        _keys: &'a LockKeys,
        _replicas: usize,
        _timeout: Duration,
    ) -> BoxFuture<'a, Result<usize, LockError>> {
        let backend = self.describe();
        Box::pin(async move {
            Err(LockError::invalid(
                "replica_sync",
                format!("replica sync is not available on {backend}"),
            ))
        })
    }

    /// The local wake-up list, keyed by release channel.
    fn waiters(&self) -> &WaitList;

    /// The margin subtracted from a lease to allow for clock drift between
    /// this process and the server(s).
    fn drift(&self, ttl: Duration) -> Duration {
        ttl / 100 + Duration::from_millis(2)
    }

    /// The server(s), credentials redacted, for messages and `Debug`.
    fn describe(&self) -> String;
}
