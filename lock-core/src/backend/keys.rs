//! A lock's names as a backend sees them: the Redis names of one key
//! ([`LockKeys`], the "Data layout" table in `lib.rs`) and the patterns
//! `list` finds them by; which primitive of the lock family they name
//! ([`Kind`]); and the data layout of the counting semaphore and the
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
//! | `P{K}:places` | hash, with expiry | each waiter's token → `<kind><until>`: its kind and until when (server ms) its place is kept; beside it, `~<token>` → `<lease ms>:<fence life ms>:<server ms>:<attempt>`: the lease a release may hand it (at most a place's life), and its last attempt (when the server ran it, and its name) |
//! | `P{K}:released` | pub/sub channel | `grant:<fence>:<ms>:<attempt>:<token>` when a release handed the waiter named its permit or side (as a lock's release does); `next:<token>` when the waiter named may go now and looks itself |
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
//! release script run, in its wake mode, to hand it on
//! (`scripts/family_release.rs`). Otherwise the release script checks the
//! lease end itself, and stops after `HDEL` and `EXISTS` when neither key
//! is left: nothing to drop, nobody to pass over or to tell.
//!
//! A release hands what it gives back straight to every waiter that may go
//! then, first in line first (the free permits; after a writer, every
//! reader up to the next writer): each becomes a holder in the release's
//! own script, with a fresh fencing token and a lease of at most a place's
//! life (its client extends a longer one at its next attempt, so that a
//! grant handed to a waiter that died lapses as soon as its place would
//! have), and is told `grant:` with one message each; its client holds it
//! without another round trip. A waiter whose place carries no `~` field
//! is told `next:` instead and looks itself; a grant made by an attempt
//! names the next in line if it may go too.
//!
//! The keys of `lock_all` are plain locks (see `scripts/lock_all.lua`); on
//! Cluster, where they span slots, `redis/family.rs` takes them one by one.

use std::sync::{Arc, Mutex, PoisonError};

use crate::telemetry::LeaseKind;

/// The Redis names of one lock (the "Data layout" table in `lib.rs`):
/// `P{K}:lock`, `P{K}:fence`, `P{K}:line`, `P{K}:places` and the channel
/// `P{K}:released`, kept back to back in one allocation (built on every
/// acquisition and held by every lease: one string, not five).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LockKeys {
    /// Where the key as the user gave it starts in `names`: see
    /// [`LockKeys::key`].
    key_at: usize,
    /// Where it ends (`stem - 1` for a lock: the `}` before the suffixes;
    /// `stem` for an election, whose key includes the `}:election` that no
    /// user key can contain).
    key_end: usize,
    /// The five names, in the order of [`SUFFIXES`].
    names: Box<str>,
    /// The length of `P{K}`, the stem every name starts with.
    stem: usize,
    /// Which primitive these names belong to (a plain lock unless built by
    /// [`LockKeys::of_kind`]).
    pub(crate) kind: Kind,
}

/// What follows `P{name}` in every Redis name of an election.
const ELECTION: &str = ":election";

/// The names' suffixes, in their order in [`LockKeys`]'s `names`.
const SUFFIXES: [&str; 5] = [":lock", ":fence", ":line", ":places", ":released"];

impl LockKeys {
    pub(crate) fn new(prefix: &str, key: &str) -> LockKeys {
        // On every acquisition: plain pushes into one string, not `format!`.
        let stem = prefix.len() + key.len() + 2;
        let suffixes: usize = SUFFIXES.iter().map(|s| s.len()).sum();
        let mut names = String::with_capacity(stem * SUFFIXES.len() + suffixes);
        for suffix in SUFFIXES {
            names.push_str(prefix);
            names.push('{');
            names.push_str(key);
            names.push('}');
            names.push_str(suffix);
        }
        LockKeys {
            key_at: prefix.len() + 1,
            key_end: stem - 1,
            names: names.into_boxed_str(),
            stem,
            kind: Kind::Lock,
        }
    }

    /// The names of the election `name`: those of a plain lock whose stem
    /// is `P{name}:election` (`P{name}:election:lock`, `…:fence`, …), in
    /// the hash slot of `name`. No lock key can make that stem (a key
    /// cannot contain `}`), so an election never shares a name with a
    /// lock. Its key, as [`key`](Self::key) gives it, is `name}:election`:
    /// for the same reason distinct from every lock key (in the restart
    /// gate's per-key records, re-entry and messages alike).
    pub(crate) fn election(prefix: &str, name: &str) -> LockKeys {
        let stem = prefix.len() + name.len() + 2 + ELECTION.len();
        let suffixes: usize = SUFFIXES.iter().map(|s| s.len()).sum();
        let mut names = String::with_capacity(stem * SUFFIXES.len() + suffixes);
        for suffix in SUFFIXES {
            names.push_str(prefix);
            names.push('{');
            names.push_str(name);
            names.push('}');
            names.push_str(ELECTION);
            names.push_str(suffix);
        }
        LockKeys {
            key_at: prefix.len() + 1,
            key_end: stem,
            names: names.into_boxed_str(),
            stem,
            kind: Kind::Lock,
        }
    }

    /// The election's name, for an election's names (`None` for a lock's).
    pub(crate) fn election_name(&self) -> Option<&str> {
        self.key().strip_suffix(ELECTION)?.strip_suffix('}')
    }

    /// The names of `key` for a primitive of the lock family.
    pub(crate) fn of_kind(prefix: &str, key: &str, kind: Kind) -> LockKeys {
        LockKeys {
            kind,
            ..LockKeys::new(prefix, key)
        }
    }

    /// The key as the user gave it (without prefix), for messages.
    pub(crate) fn key(&self) -> &str {
        self.names
            .get(self.key_at..self.key_end)
            .unwrap_or_default()
    }

    /// The `i`th name of [`SUFFIXES`].
    fn name(&self, i: usize) -> &str {
        let start: usize = SUFFIXES[..i].iter().map(|s| self.stem + s.len()).sum();
        let end = start + self.stem + SUFFIXES[i].len();
        self.names.get(start..end).unwrap_or_default()
    }

    /// `P{K}:lock`: the lock (a string: the owner token), or a semaphore's
    /// or rw lock's holders (a hash).
    pub(crate) fn lock(&self) -> &str {
        self.name(0)
    }

    /// `P{K}:fence`: the last fencing token written.
    pub(crate) fn fence(&self) -> &str {
        self.name(1)
    }

    /// `P{K}:line`: the waiters' line.
    pub(crate) fn line(&self) -> &str {
        self.name(2)
    }

    /// `P{K}:places`: the waiters' places.
    pub(crate) fn places(&self) -> &str {
        self.name(3)
    }

    /// `P{K}:released`: the release channel.
    pub(crate) fn channel(&self) -> &str {
        self.name(4)
    }
}

impl LockKeys {
    /// `P{K}:grant`: the record of the holder's fencing token, written a
    /// moment after a grant that did not write it (see `scripts/fast.rs`).
    pub(crate) fn grant_record(&self) -> String {
        let stem = self.names.get(..self.stem).unwrap_or_default();
        let mut name = String::with_capacity(stem.len() + 6);
        name.push_str(stem);
        name.push_str(":grant");
        name
    }

    /// `P{K}:survived`, built when needed (rarely: shortly after a restart
    /// or failover), not on every acquisition.
    pub(crate) fn survival_mark(&self) -> String {
        let stem = self.names.get(..self.stem).unwrap_or_default();
        let mut name = String::with_capacity(stem.len() + 9);
        name.push_str(stem);
        name.push_str(":survived");
        name
    }
}

/// How many keys one `SCAN` call is asked to look at.
pub(crate) const SCAN_COUNT: usize = 100;

/// The `SCAN ... MATCH` pattern of the lock keys under `prefix` whose keys
/// match the glob `pattern`, and of the elections whose names do:
/// `prefix{pattern}*:lock` (the `*` is empty for a lock, `:election` for an
/// election), with the prefix's glob characters escaped (it is a literal).
/// A name holds one `}` only (neither prefix nor key may hold one), so
/// `pattern` matches the whole key or name.
pub(crate) fn lock_glob(prefix: &str, pattern: &str) -> String {
    let mut glob = String::with_capacity(prefix.len() + pattern.len() + 9);
    for c in prefix.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            glob.push('\\');
        }
        glob.push(c);
    }
    glob.push('{');
    glob.push_str(pattern);
    glob.push_str("}*:lock");
    glob
}

/// The key of the lock name `name` (`prefix{key}:lock`), or of the
/// election's (`prefix{name}:election:lock`, whose key is `name}:election`:
/// see [`LockKeys::election`]), if it is one.
pub(crate) fn key_of_lock_name<'a>(prefix: &str, name: &'a str) -> Option<&'a str> {
    let key = name
        .strip_prefix(prefix)?
        .strip_prefix('{')?
        .strip_suffix(":lock")?;
    let user_part = key
        .strip_suffix("}:election")
        .or_else(|| key.strip_suffix('}'))?;
    (!user_part.contains('}')).then_some(key.strip_suffix('}').unwrap_or(key))
}

impl LockKeys {
    /// The names of a key found by `list` ([`key_of_lock_name`]): a lock's,
    /// or an election's.
    pub(crate) fn listed(prefix: &str, key: &str) -> LockKeys {
        match key.strip_suffix(ELECTION).and_then(|k| k.strip_suffix('}')) {
            Some(name) => LockKeys::election(prefix, name),
            None => LockKeys::new(prefix, key),
        }
    }
}

/// The name a listed key is shown by (and matched against the pattern):
/// an election's name, or the lock's key.
pub(crate) fn shown_key(key: &str) -> &str {
    key.strip_suffix(ELECTION)
        .and_then(|k| k.strip_suffix('}'))
        .unwrap_or(key)
}

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
    /// The grant's fencing tokens, and whether they are written nowhere
    /// yet (the native free case, `lock_all_fast.rs`: one token for every
    /// key, recorded later like a fast lock's).
    fences: Mutex<(Vec<u64>, bool)>,
}

impl AllKeys {
    pub(crate) fn new(keys: Vec<LockKeys>) -> AllKeys {
        AllKeys {
            keys,
            fences: Mutex::new((Vec::new(), false)),
        }
    }

    /// Remember the fencing tokens of a grant, one per key in order, as
    /// the script wrote them.
    pub(crate) fn granted(&self, fences: Vec<u64>) {
        *self.fences.lock().unwrap_or_else(PoisonError::into_inner) = (fences, false);
    }

    /// Remember a native grant: `fence` for every key, not written yet.
    pub(crate) fn granted_unwritten(&self, fence: u64) {
        *self.fences.lock().unwrap_or_else(PoisonError::into_inner) =
            (vec![fence; self.keys.len()], true);
    }

    /// Whether the grant's tokens are still to be recorded.
    pub(crate) fn unwritten(&self) -> bool {
        self.fences.lock().unwrap_or_else(PoisonError::into_inner).1
    }

    /// The fencing token `key` was granted with.
    pub(crate) fn fence_of(&self, key: &str) -> Option<u64> {
        let at = self.keys.iter().position(|k| k.key() == key)?;
        self.fences
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .0
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_election_has_names_no_lock_key_can_make() {
        let election = LockKeys::election("p:", "job");
        assert_eq!(election.lock(), "p:{job}:election:lock");
        assert_eq!(election.channel(), "p:{job}:election:released");
        assert_eq!(election.key(), "job}:election");
        assert_eq!(election.election_name(), Some("job"));
        let lock = LockKeys::new("p:", "job");
        assert_eq!(lock.key(), "job");
        assert_eq!(lock.election_name(), None);
        assert_ne!(lock.lock(), election.lock());

        // Listed back to the same names.
        assert_eq!(
            key_of_lock_name("p:", election.lock()),
            Some(election.key())
        );
        assert_eq!(key_of_lock_name("p:", lock.lock()), Some("job"));
        assert_eq!(LockKeys::listed("p:", election.key()), election);
        assert_eq!(LockKeys::listed("p:", "job"), lock);
        assert_eq!(shown_key(election.key()), "job");
        // Anything else is not a lock.
        assert_eq!(key_of_lock_name("p:", "p:{job}:other:lock"), None);
        assert_eq!(key_of_lock_name("p:", "p:{a}b}:lock"), None);
        assert_eq!(lock_glob("p*:", "jo?"), "p\\*:{jo?}*:lock");
    }
}
