//! The semaphore and the read-write lock in memory, with the rules of
//! `backend/keys.rs` (the same as the Redis scripts'): holders with
//! leases, a line served first come first served, one fencing counter per
//! key shared with the lock.

use std::time::Duration;

use tokio::time::Instant;

use super::super::wakeups::Announcement;
use super::super::{
    Acquired, FENCE_MEMORY, Inspected, LockKeys, Owned, PLACE_GRACE, Renewal, SharedHolder,
};
use super::holders::{Family, Holder, Place};
use super::{MemoryBackend, Table};
use crate::error::LockError;

fn wrong_type(keys: &LockKeys) -> LockError {
    LockError::WrongType {
        key: keys.key().to_owned(),
        redis_key: keys.lock().to_owned(),
    }
}

impl Table {
    /// Whether the family entry of `lock` has live holders (a plain lock
    /// of that key is then of the wrong type).
    pub(super) fn family_held(&mut self, lock: &str, now: Instant) -> bool {
        let Some(family) = self.families.get_mut(lock) else {
            return false;
        };
        family.holders.retain(|h| h.until > now);
        !family.holders.is_empty()
    }
}

impl MemoryBackend {
    pub(super) fn family_acquire(
        &self,
        keys: &LockKeys,
        token: &str,
        ttl: Duration,
        in_line: bool,
    ) -> Result<Acquired, LockError> {
        let letter = keys.kind.letter().unwrap_or("s");
        let permits = keys.kind.permits();
        let now = Instant::now();
        let (outcome, next) = {
            let mut table = self.table();
            if table.live(keys.lock(), now).is_some() {
                return Err(wrong_type(keys));
            }
            let mut family = table.families.remove(keys.lock()).unwrap_or_default();
            let outcome = Self::family_attempt(
                &mut table,
                &mut family,
                keys,
                (token, letter, permits),
                ttl,
                in_line,
                now,
            );
            let next = match &outcome {
                Ok(Acquired::Yes { .. }) => family.next_to_go(permits),
                _ => None,
            };
            if !family.is_empty() {
                table.families.insert(keys.lock().to_owned(), family);
            }
            (outcome, next)
        };
        if let Some(next) = next {
            self.wakeups
                .announce(keys.channel(), Announcement::Next(&next));
        }
        outcome
    }

    fn family_attempt(
        table: &mut Table,
        family: &mut Family,
        keys: &LockKeys,
        (token, letter, permits): (&str, &'static str, u32),
        ttl: Duration,
        in_line: bool,
        now: Instant,
    ) -> Result<Acquired, LockError> {
        if family.settle(now, letter) {
            return Err(wrong_type(keys));
        }
        if let Some(mine) = family.holders.iter_mut().find(|h| h.token == token) {
            mine.until = now + ttl;
            return Ok(Acquired::Yes { fence: mine.fence });
        }
        let position = family
            .line
            .iter()
            .position(|p| p.token == token)
            .unwrap_or(family.line.len());
        if family.may_go(letter, position, permits) {
            if position < family.line.len() {
                family.line.remove(position);
            }
            let fence = table.next_fence(keys.fence(), now, now + ttl + FENCE_MEMORY);
            family.holders.push(Holder {
                token: token.to_owned(),
                letter,
                until: now + ttl,
                fence,
            });
            return Ok(Acquired::Yes { fence });
        }
        let first_lease = family.holders.iter().map(|h| h.until).min();
        let first_place = family
            .line
            .front()
            .filter(|p| p.token != token)
            .map(|p| p.kept);
        let wake = match (first_lease, first_place) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let sleep = wake.map(|at| at - now);
        if in_line {
            let kept = now + sleep.unwrap_or_default() + PLACE_GRACE;
            match family.line.iter_mut().find(|p| p.token == token) {
                Some(place) => place.kept = kept,
                None => family.line.push_back(Place {
                    token: token.to_owned(),
                    letter,
                    kept,
                }),
            }
        }
        Ok(Acquired::Busy { expires_in: sleep })
    }

    /// Give back (or, with `keep`, let end after `keep`) `token`'s permit
    /// or side; tell the first in line if it may go.
    pub(super) fn family_release(&self, keys: &LockKeys, token: &str, keep: Duration) -> Owned {
        let now = Instant::now();
        let permits = keys.kind.permits();
        let next = {
            let mut table = self.table();
            let Some(family) = table.families.get_mut(keys.lock()) else {
                return Owned::No;
            };
            family.holders.retain(|h| h.until > now);
            let Some(at) = family.holders.iter().position(|h| h.token == token) else {
                return Owned::No;
            };
            if !keep.is_zero() {
                family.holders[at].until = now + keep;
                return Owned::Yes;
            }
            family.holders.remove(at);
            family.line.retain(|p| p.kept > now);
            let next = family.next_to_go(permits);
            if family.is_empty() {
                table.families.remove(keys.lock());
            }
            next
        };
        if let Some(next) = next {
            self.wakeups
                .announce(keys.channel(), Announcement::Next(&next));
        }
        Owned::Yes
    }

    /// Remove what `token` got or keeps: its permit or side, its place.
    pub(super) fn family_abandon(&self, keys: &LockKeys, token: &str) {
        let now = Instant::now();
        let next = {
            let mut table = self.table();
            let Some(family) = table.families.get_mut(keys.lock()) else {
                return;
            };
            let before = family.holders.len() + family.line.len();
            family.holders.retain(|h| h.token != token && h.until > now);
            family.line.retain(|p| p.token != token && p.kept > now);
            let next = family.next_to_go(keys.kind.permits());
            let changed = family.holders.len() + family.line.len() < before;
            if family.is_empty() {
                table.families.remove(keys.lock());
            }
            next.filter(|_| changed)
        };
        if let Some(next) = next {
            self.wakeups
                .announce(keys.channel(), Announcement::Next(&next));
        }
    }

    /// The holders and line of a semaphore or rw lock (`None`: none hold it).
    pub(super) fn family_inspect(
        table: &mut Table,
        keys: &LockKeys,
        now: Instant,
    ) -> Option<Inspected> {
        let family = table.families.get(keys.lock())?;
        let holders = family
            .holders
            .iter()
            .filter(|h| h.until > now)
            .map(|h| SharedHolder {
                token: h.token.clone(),
                letter: h.letter.chars().next().unwrap_or('s'),
                ttl: h.until - now,
                fence: h.fence,
            })
            .collect();
        let waiters = family.line.iter().filter(|p| p.kept > now).count();
        Inspected::of_family(keys.key(), holders, waiters)
    }

    /// An operator's release of every holder; `None` when `keys` names no
    /// semaphore or rw lock.
    pub(super) fn family_force_release(&self, keys: &LockKeys, now: Instant) -> Option<bool> {
        let next = {
            let mut table = self.table();
            let family = table.families.get_mut(keys.lock())?;
            family.holders.retain(|h| h.until > now);
            family.line.retain(|p| p.kept > now);
            let holders = std::mem::take(&mut family.holders);
            let next = family.line.front().map(|p| p.token.clone());
            if family.is_empty() {
                table.families.remove(keys.lock());
            }
            if holders.is_empty() {
                return Some(false);
            }
            for holder in holders {
                let until = holder.until.max(now + super::MIN_FORCED_MARKER);
                table.forced.insert(
                    forced_name(keys.lock(), &holder.token),
                    (holder.token, until),
                );
            }
            next
        };
        if let Some(next) = next {
            self.wakeups
                .announce(keys.channel(), Announcement::Next(&next));
        }
        Some(true)
    }

    /// Renew one permit or side (a check only with a zero TTL).
    pub(super) fn family_renew(table: &mut Table, item: &Renewal, now: Instant) -> Owned {
        let held = table.families.get_mut(item.keys.lock()).and_then(|family| {
            family
                .holders
                .iter_mut()
                .find(|h| h.token == *item.token && h.until > now)
        });
        match held {
            Some(holder) => {
                if !item.ttl.is_zero() {
                    holder.until = now + item.ttl;
                }
                Owned::Yes
            }
            None => match table
                .forced
                .get(&forced_name(item.keys.lock(), &item.token))
            {
                Some((token, until)) if *token == *item.token && *until > now => {
                    Owned::ForceReleased
                }
                _ => Owned::No,
            },
        }
    }
}

/// The forced-release marker of `token` on the semaphore or rw lock `lock`.
fn forced_name(lock: &str, token: &str) -> String {
    format!("{lock} {token}")
}
