//! The embedded backend: leases in this process's memory, with the same
//! semantics as Redis (owner tokens, expiry, fencing counters, wake on
//! release). Every [`LockClient::in_memory`](crate::LockClient::in_memory)
//! client of the process shares one store, the way every client of one Redis
//! server shares its keys; key prefixes separate namespaces.
//!
//! Time is tokio's clock, so tests can run it with `tokio::time::pause()`.

mod all;
mod family;
mod holders;

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, LazyLock, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use super::keys::Kind;
use super::wakeups::{Announcement, Wakeups};
use super::{
    Acquired, Attempt, Backend, BoxFuture, FENCE_MEMORY, Inspected, LockKeys, Owned, PLACE_GRACE,
    Release, Renewal, Reply, glob, key_of_lock_name, shown_key,
};
use crate::error::LockError;

/// The shortest time an operator's release is remembered for the old
/// holder's next renewal (as `force_release.lua`).
const MIN_FORCED_MARKER: Duration = Duration::from_secs(1);

/// Expired entries are swept when the table grows past this many entries
/// since the last sweep.
const SWEEP_EVERY: usize = 1024;

#[derive(Debug, Default)]
struct Table {
    locks: HashMap<String, Entry>,
    /// Fencing counters, forgotten [`FENCE_MEMORY`] after their last use
    /// like on Redis (and restarted from the clock in microseconds).
    fences: HashMap<String, (u64, Instant)>,
    /// Each lock's line of waiters (first come, first served), as on Redis:
    /// owner token and until when the place is kept.
    lines: HashMap<String, VecDeque<(String, Instant)>>,
    /// Operators' releases, by lock key: the owner token taken and until
    /// when its next renewal is told so (`P{K}:forced` on Redis).
    forced: HashMap<String, (String, Instant)>,
    /// The semaphores and rw locks, by holders key (see `memory/family.rs`).
    families: HashMap<String, holders::Family>,
    size_after_sweep: usize,
}

#[derive(Debug)]
struct Entry {
    token: String,
    expires_at: Instant,
}

impl Table {
    /// The live entry of `key`, dropping it if it has expired.
    fn live(&mut self, key: &str, now: Instant) -> Option<&mut Entry> {
        if self.locks.get(key).is_some_and(|e| e.expires_at <= now) {
            self.locks.remove(key);
        }
        self.locks.get_mut(key)
    }

    fn sweep(&mut self, now: Instant) {
        let size = self.locks.len() + self.fences.len() + self.lines.len();
        if size >= self.size_after_sweep + SWEEP_EVERY {
            self.locks.retain(|_, e| e.expires_at > now);
            self.fences.retain(|_, (_, forget_at)| *forget_at > now);
            self.forced.retain(|_, (_, until)| *until > now);
            self.families.retain(|_, family| family.expire(now));
            self.lines.retain(|_, line| {
                line.retain(|(_, kept)| *kept > now);
                !line.is_empty()
            });
            self.size_after_sweep = self.locks.len() + self.fences.len() + self.lines.len();
        }
    }

    /// The first waiter in `line` whose place is still kept (lapsed places
    /// are dropped).
    fn head(&mut self, line_key: &str, now: Instant) -> Option<(String, Instant)> {
        let line = self.lines.get_mut(line_key)?;
        while line.front().is_some_and(|(_, kept)| *kept <= now) {
            line.pop_front();
        }
        let head = line.front().cloned();
        if head.is_none() {
            self.lines.remove(line_key);
        }
        head
    }

    /// Keep (or take) `token`'s place in line for `sleep` plus the grace.
    fn wait_in_line(&mut self, line_key: &str, token: &str, now: Instant, sleep: Duration) {
        let kept = now + sleep + PLACE_GRACE;
        let line = self.lines.entry(line_key.to_owned()).or_default();
        match line.iter_mut().find(|(t, _)| t == token) {
            Some(place) => place.1 = kept,
            None => line.push_back((token.to_owned(), kept)),
        }
    }

    /// Until when `token`'s place in `line` is kept (lapsed or not), if it
    /// has one.
    fn place_of(&self, line_key: &str, token: &str) -> Option<Instant> {
        self.lines
            .get(line_key)?
            .iter()
            .find(|(t, _)| t == token)
            .map(|&(_, kept)| kept)
    }

    fn leave_line(&mut self, line_key: &str, token: &str) -> bool {
        let Some(line) = self.lines.get_mut(line_key) else {
            return false;
        };
        let before = line.len();
        line.retain(|(t, _)| t != token);
        let left = line.len() < before;
        if line.is_empty() {
            self.lines.remove(line_key);
        }
        left
    }

    /// The next fencing token of `key`, remembered until `forget_at`: one
    /// above the last, and at least the clock in microseconds, as on Redis.
    fn next_fence(&mut self, key: &str, now: Instant, forget_at: Instant) -> u64 {
        let clock = super::clock_micros();
        let next = match self.fences.get(key) {
            Some(&(last, until)) if until > now => last.saturating_add(1).max(clock),
            _ => clock,
        };
        self.fences.insert(key.to_owned(), (next, forget_at));
        next
    }
}

/// The process-wide store.
#[derive(Debug, Default)]
pub(crate) struct MemoryBackend {
    table: Mutex<Table>,
    wakeups: Wakeups,
}

static SHARED: LazyLock<Arc<MemoryBackend>> = LazyLock::new(Arc::default);

impl MemoryBackend {
    /// The store shared by all in-memory clients of this process.
    pub(crate) fn shared() -> Arc<MemoryBackend> {
        SHARED.clone()
    }

    fn table(&self) -> MutexGuard<'_, Table> {
        // Every update below is complete before anything can panic.
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn acquire_now(&self, keys: &LockKeys, token: &str, ttl: Duration, in_line: bool) -> Acquired {
        let now = Instant::now();
        let mut table = self.table();
        table.sweep(now);
        let head = table.head(keys.line(), now);
        let busy_for = match (&head, table.live(keys.lock(), now)) {
            // Ours already (a retried call).
            (_, Some(entry)) if entry.token == token => {
                entry.expires_at = now + ttl;
                table.leave_line(keys.line(), token);
                let fence = table.fences.get(keys.fence()).map_or(0, |&(f, _)| f);
                return Acquired::Yes { fence };
            }
            (_, Some(entry)) => Some(entry.expires_at - now),
            // Free, but kept for the first in line.
            (Some((first, kept)), None) if first != token => Some(*kept - now),
            (_, None) => None,
        };
        if let Some(sleep) = busy_for {
            if in_line {
                table.wait_in_line(keys.line(), token, now, sleep);
            }
            return Acquired::Busy {
                expires_in: Some(sleep),
            };
        }
        table.leave_line(keys.line(), token);
        let fence = table.next_fence(keys.fence(), now, now + ttl + FENCE_MEMORY);
        table.locks.insert(
            keys.lock().to_owned(),
            Entry {
                token: token.to_owned(),
                expires_at: now + ttl,
            },
        );
        Acquired::Yes { fence }
    }

    fn release_now(&self, keys: &LockKeys, token: &str, keep: Duration) -> Owned {
        let now = Instant::now();
        let next = {
            let mut table = self.table();
            match table.live(keys.lock(), now) {
                Some(entry) if entry.token == token => {
                    if keep.is_zero() {
                        table.locks.remove(keys.lock());
                    } else {
                        entry.expires_at = now + keep;
                    }
                }
                _ => return Owned::No,
            }
            table.head(keys.line(), now).map(|(next, _)| next)
        };
        // With a keep, the woken waiter finds it still taken and learns
        // until when.
        let announcement = match &next {
            Some(next) => Announcement::Next(next),
            None => Announcement::Free(token),
        };
        self.wakeups.announce(keys.channel(), announcement);
        Owned::Yes
    }

    fn abandon_now(&self, keys: &LockKeys, token: &str) {
        let now = Instant::now();
        let (held, next) = {
            let mut table = self.table();
            let held = table
                .live(keys.lock(), now)
                .is_some_and(|entry| entry.token == token);
            if held {
                table.locks.remove(keys.lock());
            }
            let left = table.leave_line(keys.line(), token);
            if !(held || left) || table.live(keys.lock(), now).is_some() {
                return;
            }
            (held, table.head(keys.line(), now))
        };
        match next {
            Some((next, _)) => self
                .wakeups
                .announce(keys.channel(), Announcement::Next(&next)),
            None if held => self
                .wakeups
                .announce(keys.channel(), Announcement::Free(token)),
            None => {}
        }
    }

    fn renew_now(&self, batch: &[Renewal]) -> Vec<Owned> {
        let now = Instant::now();
        let mut table = self.table();
        batch
            .iter()
            .map(|item| match table.live(item.keys.lock(), now) {
                _ if holders::is_family(&item.keys.kind) => {
                    Self::family_renew(&mut table, item, now)
                }
                Some(entry) if entry.token == *item.token => {
                    // Zero: a check only.
                    if !item.ttl.is_zero() {
                        entry.expires_at = now + item.ttl;
                    }
                    Owned::Yes
                }
                _ => match table.forced.get(item.keys.lock()) {
                    Some((token, until)) if *token == *item.token && *until > now => {
                        Owned::ForceReleased
                    }
                    _ => Owned::No,
                },
            })
            .collect()
    }

    fn inspect_now(&self, keys: &LockKeys) -> Option<Inspected> {
        let now = Instant::now();
        let mut table = self.table();
        if table.families.contains_key(keys.lock()) {
            return Self::family_inspect(&mut table, keys, now);
        }
        let (token, expires_at) = {
            let entry = table.live(keys.lock(), now)?;
            (entry.token.clone(), entry.expires_at)
        };
        Some(Inspected {
            key: keys.key().to_owned(),
            token,
            ttl: expires_at - now,
            fence: table
                .fences
                .get(keys.fence())
                .filter(|(_, until)| *until > now)
                .map_or(0, |&(fence, _)| fence),
            waiters: table.lines.get(keys.line()).map_or(0, |line| {
                line.iter().filter(|(_, kept)| *kept > now).count()
            }),
            shared: Vec::new(),
        })
    }

    fn list_now(&self, prefix: &str, pattern: &str) -> Vec<Inspected> {
        let names: Vec<String> = {
            let now = Instant::now();
            let table = self.table();
            table
                .locks
                .iter()
                .filter(|(_, entry)| entry.expires_at > now)
                .map(|(name, _)| name)
                .chain(table.families.keys())
                .filter_map(|name| key_of_lock_name(prefix, name))
                .filter(|key| glob::matches(pattern, shown_key(key)))
                .map(str::to_owned)
                .collect()
        };
        names
            .iter()
            .filter_map(|key| self.inspect_now(&LockKeys::listed(prefix, key)))
            .collect()
    }

    fn force_release_now(&self, keys: &LockKeys) -> bool {
        let now = Instant::now();
        if let Some(forced) = self.family_force_release(keys, now) {
            return forced;
        }
        let (holder, next) = {
            let mut table = self.table();
            let Some(entry) = table.live(keys.lock(), now) else {
                return false;
            };
            let holder = entry.token.clone();
            let marker_until = entry.expires_at.max(now + MIN_FORCED_MARKER);
            table.locks.remove(keys.lock());
            table
                .forced
                .insert(keys.lock().to_owned(), (holder.clone(), marker_until));
            (holder, table.head(keys.line(), now).map(|(next, _)| next))
        };
        let announcement = match &next {
            Some(next) => Announcement::Next(next),
            None => Announcement::Free(&holder),
        };
        self.wakeups.announce(keys.channel(), announcement);
        true
    }
}

impl Backend for MemoryBackend {
    fn acquire<'a>(&'a self, attempt: Attempt<'a>) -> Reply<'a, Acquired> {
        let (keys, token, ttl, in_line) = attempt.parts();
        if holders::is_family(&keys.kind) {
            let outcome = self.family_acquire(keys, token, ttl, in_line);
            return Box::pin(async move { outcome });
        }
        if let Kind::All(all) = &keys.kind {
            let outcome = self.all_acquire(all, token, ttl, in_line);
            return Box::pin(async move { outcome });
        }
        if self.table().family_held(keys.lock(), Instant::now()) {
            let wrong = LockError::WrongType {
                key: keys.key().to_owned(),
                redis_key: keys.lock().to_owned(),
            };
            return Box::pin(async move { Err(wrong) });
        }
        let outcome = self.acquire_now(keys, token, ttl, in_line);
        Box::pin(async move { Ok(outcome) })
    }

    fn abandon<'a>(&'a self, keys: &'a LockKeys, token: &'a str) -> BoxFuture<'a, ()> {
        if holders::is_family(&keys.kind) {
            self.family_abandon(keys, token);
        } else if let Kind::All(all) = &keys.kind {
            self.all_abandon(all, token);
        } else {
            self.abandon_now(keys, token);
        }
        Box::pin(async {})
    }

    fn release<'a>(&'a self, release: Release<'a>) -> Reply<'a, Owned> {
        let (keys, token, keep, _) = release.parts();
        let outcome = if holders::is_family(&keys.kind) {
            self.family_release(keys, token, keep)
        } else if let Kind::All(all) = &keys.kind {
            self.all_release(all, token, keep)
        } else {
            self.release_now(keys, token, keep)
        };
        Box::pin(async move { Ok(outcome) })
    }

    fn renew<'a>(&'a self, batch: &'a [Renewal]) -> Reply<'a, Vec<Owned>> {
        let outcome = if batch
            .iter()
            .any(|item| matches!(item.keys.kind, Kind::All(_)))
        {
            batch
                .iter()
                .map(|item| match &item.keys.kind {
                    Kind::All(all) => self.all_renew(all, item),
                    _ => self
                        .renew_now(std::slice::from_ref(item))
                        .first()
                        .copied()
                        .unwrap_or(Owned::No),
                })
                .collect()
        } else {
            self.renew_now(batch)
        };
        Box::pin(async move { Ok(outcome) })
    }

    fn inspect<'a>(&'a self, keys: &'a LockKeys) -> Reply<'a, Option<Inspected>> {
        let outcome = self.inspect_now(keys);
        Box::pin(async move { Ok(outcome) })
    }

    fn list<'a>(&'a self, prefix: &'a str, pattern: &'a str) -> Reply<'a, Vec<Inspected>> {
        let outcome = self.list_now(prefix, pattern);
        Box::pin(async move { Ok(outcome) })
    }

    fn force_release<'a>(&'a self, keys: &'a LockKeys) -> Reply<'a, bool> {
        let outcome = self.force_release_now(keys);
        Box::pin(async move { Ok(outcome) })
    }

    fn listen<'a>(&'a self, _keys: &'a LockKeys) -> Reply<'a, ()> {
        // Releases wake `wakeups` directly: nothing to subscribe to.
        Box::pin(async { Ok(()) })
    }

    fn unlisten(&self, _keys: &LockKeys) {}

    fn sync_replicas<'a>(
        &'a self,
        _keys: &'a LockKeys,
        replicas: usize,
        _timeout: Duration,
    ) -> Reply<'a, usize> {
        // Nothing to replicate: an in-process lease is as durable as the
        // process, which is what a synced acquisition asks for.
        Box::pin(async move { Ok(replicas) })
    }

    fn wakeups(&self) -> &Wakeups {
        &self.wakeups
    }

    fn drift(&self, _ttl: Duration) -> Duration {
        // One clock: the store and the guards read the same one.
        Duration::ZERO
    }

    fn place_life(&self) -> Duration {
        // (No line in a store: a waiter in memory dies with its process.)
        super::PLACE_LIFE
    }

    fn describe(&self) -> String {
        "in-memory".to_owned()
    }
}

/// What the fault kit ([`crate::testing`]) does to a store.
#[cfg(feature = "testing")]
impl MemoryBackend {
    /// A store of its own, shared with no other client.
    pub(crate) fn isolated() -> Arc<MemoryBackend> {
        Arc::default()
    }

    /// Whether the lock named `lock_key` (a Redis name) is held now.
    pub(crate) fn is_locked(&self, lock_key: &str) -> bool {
        self.table().live(lock_key, Instant::now()).is_some()
    }

    /// Give a held lock to `thief`, keeping its expiry: the holder's next
    /// renewal or release is refused. Returns whether it was held.
    pub(crate) fn steal(&self, lock_key: &str, thief: &str) -> bool {
        match self.table().live(lock_key, Instant::now()) {
            Some(entry) => {
                thief.clone_into(&mut entry.token);
                true
            }
            None => false,
        }
    }

    /// Let a held lock expire now, as its TTL running out on the server
    /// would: nobody is told (waiters wake when they would have).
    /// Returns whether it was held.
    pub(crate) fn expire(&self, lock_key: &str) -> bool {
        let mut table = self.table();
        let held = table.live(lock_key, Instant::now()).is_some();
        table.locks.remove(lock_key);
        held
    }

    /// Forget everything, as a server restarted without persistence.
    pub(crate) fn clear(&self) {
        let mut table = self.table();
        table.locks.clear();
        table.fences.clear();
        table.lines.clear();
        table.families.clear();
        table.size_after_sweep = 0;
    }
}
