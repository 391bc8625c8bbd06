//! The lock family as a backend sees it: which primitive a [`LockKeys`]
//! names ([`Kind`]), and the data layout of the counting semaphore and the
//! read-write lock on Redis.
//!
//! # Data layout (semaphore and read-write lock)
//!
//! A semaphore or rw lock with key `K` under the prefix `P` uses the same
//! names as a lock (all under the hash tag `{K}`, so one cluster slot):
//!
//! | Redis name | type | content |
//! | --- | --- | --- |
//! | `P{K}:lock` | hash, with expiry | the holders: owner token → `<kind><until>:<fence>`, where kind is `s` (semaphore permit), `r` (read share) or `w` (the writer), `until` the end of that holder's lease in server ms and `fence` its fencing token; the key's own expiry is the latest lease |
//! | `P{K}:fence` | integer, with expiry | the last fencing token issued above the server clock: each grant issues the server clock in µs, raised to one above this key and above every live holder's token; only a raised token is written (the next grant's clock exceeds one that was not) |
//! | `P{K}:line` | list, with expiry | the line of waiters' owner tokens, first come first served |
//! | `P{K}:places` | hash, with expiry | each waiter's token → `<kind><until>`: its kind and until when (server ms) its place is kept |
//! | `P{K}:released` | pub/sub channel | `next:<token>` when the waiter named may go now |
//!
//! The hash type of `P{K}:lock` is what makes a plain lock of the same key
//! a `WRONGTYPE` (a lock's key is a string), and the kind letters keep a
//! semaphore and a rw lock of the same key apart.
//!
//! # Fairness
//!
//! A waiter may go when what it asks is compatible with the holders and
//! nobody before it in line would be passed over:
//!
//! - a permit: fewer than `permits` holders, and fewer waiters before it in
//!   line than free permits (a newcomer, in line nowhere, goes only when
//!   there is a permit for everyone in line and for it);
//! - a read share: no writer holds it and no writer waits before it;
//! - the write side: nobody holds it and nobody waits before it.
//!
//! A free grant (no holders key, no line key, no fence key) is the acquire
//! script's first branch: `TIME`, `EXISTS`, `HSET`, `PEXPIRE`. A release
//! of a lease still valid on its holder's clock, on one server, is no
//! script: `HDEL` of the holder's own field (named by its owner token)
//! pipelined with `EXISTS` of the line; only a line that exists makes the
//! release script run, in its wake mode, to name the first in line
//! (`scripts/family_release.rs`). Otherwise the release script checks the
//! lease end itself, and stops after `HDEL` and `EXISTS` when neither key
//! is left: nothing to drop, nobody to pass over or to tell.
//!
//! A release names the first in line when it may go; each grant names the
//! next one if it may go too (the next reader after a writer, the next
//! permit), so a chain of waiters is woken one message each, without
//! polling.
//!
//! The keys of `lock_all` are plain locks (see `scripts/lock_all.lua`); on
//! Cluster, where they span slots, `redis/family.rs` takes them one by one.

use std::sync::{Arc, Mutex, PoisonError};

use super::LockKeys;
use crate::telemetry::LeaseKind;

/// Which primitive the names of a [`LockKeys`] belong to.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) enum Kind {
    /// An exclusive lock (`LockClient::lock`).
    #[default]
    Lock,
    /// One permit of a counting semaphore of `permits` permits.
    Semaphore {
        /// How many holders at most.
        permits: u32,
    },
    /// A read share of a read-write lock.
    Read,
    /// The write side of a read-write lock.
    Write,
    /// Every one of these plain locks at once, sorted by key, without
    /// duplicates (`LockClient::lock_all`).
    All(Arc<AllKeys>),
}

impl Kind {
    /// The `kind` label of a held lease's metrics (as
    /// `Shape::lease_kind` names the request's).
    pub(crate) fn lease_kind(&self) -> LeaseKind {
        match self {
            Kind::Lock => LeaseKind::Lock,
            Kind::Semaphore { .. } => LeaseKind::Semaphore,
            Kind::Read => LeaseKind::Read,
            Kind::Write => LeaseKind::Write,
            Kind::All(_) => LeaseKind::All,
        }
    }
}

/// The plain locks of one `lock_all`, and the fencing tokens its grant
/// issued (set by the backend when it grants them all).
#[derive(Debug)]
pub(crate) struct AllKeys {
    /// The names of each key, sorted by key.
    pub(crate) keys: Vec<LockKeys>,
    fences: Mutex<Vec<u64>>,
}

impl AllKeys {
    pub(crate) fn new(keys: Vec<LockKeys>) -> AllKeys {
        AllKeys {
            keys,
            fences: Mutex::new(Vec::new()),
        }
    }

    /// Remember the fencing tokens of a grant, one per key in order.
    pub(crate) fn granted(&self, fences: Vec<u64>) {
        *self.fences.lock().unwrap_or_else(PoisonError::into_inner) = fences;
    }

    /// The fencing token `key` was granted with.
    pub(crate) fn fence_of(&self, key: &str) -> Option<u64> {
        let at = self.keys.iter().position(|k| k.key() == key)?;
        self.fences
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(at)
            .copied()
    }
}

impl PartialEq for AllKeys {
    fn eq(&self, other: &AllKeys) -> bool {
        self.keys == other.keys
    }
}

impl Eq for AllKeys {}

impl Kind {
    /// The letter of a holder or waiter of this kind in the family's hashes
    /// (`None` for a plain lock and `lock_all`, which are plain locks).
    pub(crate) fn letter(&self) -> Option<&'static str> {
        match self {
            Kind::Semaphore { .. } => Some("s"),
            Kind::Read => Some("r"),
            Kind::Write => Some("w"),
            Kind::Lock | Kind::All(_) => None,
        }
    }

    /// Whether this is a semaphore or a rw lock side (a hash of holders).
    pub(crate) fn is_shared(&self) -> bool {
        self.letter().is_some()
    }

    /// How many may hold it at once (0: unlimited, the read side).
    pub(crate) fn permits(&self) -> u32 {
        match self {
            Kind::Semaphore { permits } => *permits,
            Kind::Read => 0,
            Kind::Lock | Kind::Write | Kind::All(_) => 1,
        }
    }

    /// For messages: "lock", "semaphore", ...
    pub(crate) fn noun(&self) -> &'static str {
        match self {
            Kind::Lock => "lock",
            Kind::Semaphore { .. } => "semaphore",
            Kind::Read | Kind::Write => "rw lock",
            Kind::All(_) => "lock_all",
        }
    }
}
