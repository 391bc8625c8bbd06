//! `lock_all` in memory: several plain locks at once or none, with the
//! rules of `scripts/lock_all.lua`: each key free and nobody in its line
//! before the caller; a waiter keeps a place in the line of every key,
//! all taken at once, holding nothing meanwhile.

use std::time::Duration;

use tokio::time::Instant;

use super::super::keys::AllKeys;
use super::super::wakeups::Announcement;
use super::super::{Acquired, FENCE_MEMORY, LockKeys, Owned, Renewal};
use super::MemoryBackend;
use crate::error::LockError;

impl MemoryBackend {
    pub(super) fn all_acquire(
        &self,
        all: &AllKeys,
        token: &str,
        ttl: Duration,
        in_line: bool,
    ) -> Result<Acquired, LockError> {
        let now = Instant::now();
        let mut table = self.table();
        // Each key not free for us, and how long until the last of them
        // may be.
        let mut blocked = false;
        let mut sleep = Duration::ZERO;
        // Our places, and those still kept.
        let (mut present, mut live) = (0, 0);
        for keys in &all.keys {
            if table.family_held(keys.lock(), now) {
                return Err(LockError::WrongType {
                    key: keys.key().to_owned(),
                    redis_key: keys.lock().to_owned(),
                });
            }
            let head = table.head(keys.line(), now);
            let busy_for = match (&head, table.live(keys.lock(), now)) {
                (_, Some(entry)) if entry.token == token => None,
                (_, Some(entry)) => Some(entry.expires_at - now),
                (Some((first, kept)), None) if first != token => Some(*kept - now),
                (_, None) => None,
            };
            if let Some(wait) = busy_for {
                blocked = true;
                sleep = sleep.max(wait);
            }
            if let Some(kept) = table.place_of(keys.line(), token) {
                present += 1;
                if kept > now {
                    live += 1;
                }
            }
        }
        if blocked {
            // Give back every key still ours (a grant whose reply was lost,
            // retried after one of its keys alone was taken from it by a
            // force_release and given to another: nothing is held while
            // waiting). Without a wait, or with a place lapsed or lost in
            // some line, leave every line to join them all again at the
            // back, so that the places kept stand for one arrival; where
            // that makes a waiter first of a free lock, tell it (after the
            // table is let go).
            let rejoin = !in_line || (present > 0 && live < all.keys.len());
            let mut told = Vec::new();
            for keys in &all.keys {
                let held = table
                    .live(keys.lock(), now)
                    .is_some_and(|entry| entry.token == token);
                if held {
                    table.locks.remove(keys.lock());
                }
                let was_first = table
                    .head(keys.line(), now)
                    .is_some_and(|(t, _)| t == token);
                let left = rejoin && table.leave_line(keys.line(), token);
                if (held || (left && was_first))
                    && table.live(keys.lock(), now).is_none()
                    && let Some((next, _)) = table.head(keys.line(), now)
                    && next != token
                {
                    told.push((keys.channel().to_owned(), next));
                }
            }
            // With a wait, a place in every line (first come, first served
            // across the keys, see `scripts/lock_all.lua`).
            if in_line {
                for keys in &all.keys {
                    table.wait_in_line(keys.line(), token, now, sleep);
                }
            }
            drop(table);
            for (channel, next) in told {
                self.wakeups.announce(&channel, Announcement::Next(&next));
            }
            return Ok(Acquired::Busy {
                expires_in: Some(sleep),
            });
        }
        let mut fences = Vec::with_capacity(all.keys.len());
        for keys in &all.keys {
            table.leave_line(keys.line(), token);
            let ours = table
                .live(keys.lock(), now)
                .is_some_and(|entry| entry.token == token);
            let fence = if ours {
                table.fences.get(keys.fence()).map_or(0, |&(f, _)| f)
            } else {
                table.next_fence(keys.fence(), now, now + ttl + FENCE_MEMORY)
            };
            table.locks.insert(
                keys.lock().to_owned(),
                super::Entry {
                    token: token.to_owned(),
                    expires_at: now + ttl,
                },
            );
            fences.push(fence);
        }
        let first = fences.first().copied().unwrap_or(0);
        all.granted(fences);
        Ok(Acquired::Yes { fence: first })
    }

    /// Give back every key, each as a plain release; ours only if every
    /// one was.
    pub(super) fn all_release(&self, all: &AllKeys, token: &str, keep: Duration) -> Owned {
        let mut outcome = Owned::Yes;
        for keys in &all.keys {
            let owned = self.release_now(keys, token, keep);
            if outcome == Owned::Yes {
                outcome = owned;
            }
        }
        outcome
    }

    pub(super) fn all_abandon(&self, all: &AllKeys, token: &str) {
        for keys in &all.keys {
            self.abandon_now(keys, token);
        }
    }

    /// One renewal of a `lock_all` lease: every key, ours only if all are.
    pub(super) fn all_renew(&self, all: &AllKeys, item: &Renewal) -> Owned {
        let items: Vec<Renewal> = all
            .keys
            .iter()
            .map(|keys: &LockKeys| Renewal {
                keys: std::sync::Arc::new(keys.clone()),
                ..item.clone()
            })
            .collect();
        self.renew_now(&items)
            .into_iter()
            .find(|owned| *owned != Owned::Yes)
            .unwrap_or(Owned::Yes)
    }
}
