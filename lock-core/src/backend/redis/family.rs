//! The semaphore and the read-write lock on Redis (data layout and
//! fairness in `backend/keys.rs`): their scripts' calls, beside the
//! lock's in `super`, which dispatches to them by the kind of the keys.

use std::collections::BTreeMap;
use std::sync::Arc;

use tokio::time::Instant;

use futures_util::future::join_all;

use super::{RedisBackend, Topology};
use crate::backend::keys::{AllKeys, Kind};
use crate::backend::scripts::{self, ScriptError};
use crate::backend::wakeups::Announcement;
use crate::backend::{Acquired, Attempt, Inspected, LockKeys, Owned, Release, Renewal};
use crate::error::LockError;

/// A renewal and its place in the watchdog's batch.
type Indexed<'a> = (usize, &'a Renewal);

/// The most keys a `lock_all` gives back with one `release_all.lua` call
/// (the script's `unpack` of its keys stops near 8000); more go key by key.
const RELEASE_AT_ONCE: usize = 256;

/// What `release_all.lua` did to one key of a `lock_all`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum First {
    /// Not sent, or left the key to `release.lua`.
    NotTried,
    /// Deleted it (ours, nobody in line).
    Released,
    /// Failed: it may have deleted the key.
    MayHaveReleased,
}

impl<T: Topology> RedisBackend<T> {
    /// One attempt at a permit or a rw-lock side (the gate already checked
    /// by the caller, as for a lock).
    pub(super) async fn family_attempt(
        &self,
        con: &mut T::Conn,
        attempt: Attempt<'_>,
    ) -> Result<Acquired, ScriptError> {
        let sent_us = Some(attempt.sent_us);
        let (keys, token, ttl, in_line) = attempt.parts();
        let (publish, one_server) = (self.topology.publish(), self.topology.one_slot());
        let life = self.gate.place_life();
        let placed = scripts::Placed {
            in_line,
            sent_us,
            life,
        };
        let here = self.listener.here.as_deref();
        scripts::family_acquire(con, keys, token, ttl, placed, here, publish, one_server).await
    }

    /// Give back a permit or a rw-lock side, handing it on to those in line
    /// that may go now; this client's own waiters hear it at once.
    pub(super) async fn family_release(&self, release: Release<'_>) -> Result<Owned, LockError> {
        let granted_at = release.granted_at;
        let (keys, token, keep, deadline) = release.parts();
        let (publish, one_server) = (self.topology.publish(), self.topology.one_slot());
        // Without a script where it may (see `scripts::family_release`):
        // the lease is still valid here, and no waiter of this client
        // waits for it (one that does would make the native step a round
        // trip more: the script's wake mode after it).
        let native = self.gate.offered().fast_path()
            && Instant::now() < deadline
            && !self.listener.wakeups.has_waiters(keys.channel());
        let here = self.listener.here.as_deref();
        let send = |mut con: T::Conn| async move {
            scripts::family_release(
                &mut con, keys, token, keep, here, publish, one_server, native,
            )
            .await
        };
        let released = match send(self.topology.connection()).await {
            Err(e) if e.connection_broke() => {
                // Sent again; a resend that finds the permit gone tells
                // what the first try did (see `resent_outcome`).
                tracing::debug!(server = %self.server, error = ?e, "leasehold: connection broke, sending again");
                let mut released = Box::pin(send(self.topology.connection()))
                    .await
                    .map_err(|e| e.into_lock_error(&self.server, keys))?;
                released.owned = self
                    .resent_outcome(keys, token, released.owned, granted_at, deadline)
                    .await;
                // The first try may have handed a permit to a waiter of
                // this client, told only by the reply that was lost (a
                // grant to this client's own waiter is not published):
                // the first of them looks again now.
                self.listener.wakeups.wake_first(keys.channel());
                released
            }
            other => other.map_err(|e| e.into_lock_error(&self.server, keys))?,
        };
        if released.owned == Owned::Yes {
            self.gate.survived(keys.key());
        }
        // This client's own waiters hear at once; a grant handed to one of
        // them was not published (its place carries `here`). (The wake
        // mode after a native HDEL that found nothing may still hand on.)
        for told in &released.told {
            self.listener
                .wakeups
                .announce(keys.channel(), Announcement::parse(told));
        }
        Ok(released.owned)
    }

    /// Read a key whose lock name is not a string: a semaphore or rw lock.
    pub(super) async fn family_inspect(
        &self,
        keys: &LockKeys,
    ) -> Result<Option<Inspected>, LockError> {
        self.call(|mut con| async move { scripts::family_inspect(&mut con, keys).await })
            .await
            .map_err(|e| e.into_lock_error(&self.server, keys))
    }

    /// One attempt of a `lock_all`: one script when its keys share a slot
    /// (always on one server), else key by key (Cluster): each taken in
    /// sorted order by the lock's own script, and every one taken given back
    /// as soon as one is busy, so that nothing is held while waiting; the
    /// caller keeps a place only in the busy key's line. (Across slots,
    /// first come first served holds per key only: places taken key by key
    /// could stand in different orders in two lines, and two such waiters
    /// would each keep its turn from the other. In one slot the script takes
    /// every place at once.)
    pub(super) async fn lock_all_attempt(
        &self,
        con: &mut T::Conn,
        all: &AllKeys,
        attempt: Attempt<'_>,
        claimed: Option<scripts::Claimed>,
    ) -> Result<Acquired, ScriptError> {
        let (_, token, ttl, in_line) = attempt.parts();
        let publish = self.topology.publish();
        let names: Vec<&str> = all.keys.iter().map(|k| k.lock()).collect();
        if self.topology.same_slot(&names) {
            // Named: in the compact form, a release may hand this waiter
            // every key (lock_all.lua's records).
            let placed = scripts::Placed {
                in_line,
                sent_us: Some(attempt.sent_us),
                life: self.gate.place_life(),
            };
            let form = if self.compact_lock_all() {
                scripts::Form::Compact(claimed)
            } else {
                scripts::Form::Full { publish }
            };
            return scripts::lock_all(con, all, token, ttl, placed, form).await;
        }
        let mut fences = Vec::with_capacity(all.keys.len());
        for (at, keys) in all.keys.iter().enumerate() {
            let taken = scripts::acquire(
                con,
                keys,
                token,
                ttl,
                scripts::Placed {
                    in_line,
                    sent_us: None,
                    life: self.gate.place_life(),
                },
                None,
                None,
            )
            .await;
            match taken {
                Ok(Acquired::Yes { fence }) => fences.push(fence),
                busy_or_failed => {
                    // Give back what this attempt took, and leave every
                    // other line (a place kept there would hold it up).
                    for (other, keys) in all.keys.iter().enumerate() {
                        if (other != at || busy_or_failed.is_err())
                            && let Err(e) = scripts::abandon(con, keys, token, publish).await
                        {
                            tracing::debug!(key = %keys.key(), error = ?e, "leasehold: could not give back a key of lock_all; it lapses");
                        }
                    }
                    return busy_or_failed;
                }
            }
        }
        let first = fences.first().copied().unwrap_or(0);
        all.granted(fences);
        Ok(Acquired::Yes { fence: first })
    }

    /// Give back every lock of a `lock_all`, each as a plain release would
    /// (waking each key's next in line), all at once: on Cluster a key whose
    /// master is slow or down delays none of the others, and a key that
    /// fails leaves none of the others held. Ours only if every one was;
    /// the first error (in key order) once every key was tried.
    ///
    /// On one server, where it may (see [`Self::may_release_at_once`]),
    /// `release_all.lua` first deletes in one call every key that holds our
    /// plain token (nobody in its line: the common case); only the keys it
    /// left (someone in line to hand the lock to, not ours, another type)
    /// then go through `release.lua` one by one. If that one call fails,
    /// every key goes through `release.lua`, and a key found not ours while
    /// the lease is still valid is judged as a resend after a lost reply
    /// (the failed call may have deleted it: SPEC semantic 15).
    pub(super) async fn release_all(
        &self,
        all: &AllKeys,
        release: Release<'_>,
    ) -> Result<Owned, LockError> {
        let token = release.token;
        let mut first = vec![First::NotTried; all.keys.len()];
        if self.may_release_at_once(all, &release) {
            let mut con = self.topology.connection();
            match scripts::release_all(&mut con, all, token).await {
                Ok(left) => {
                    for ((keys, left), first) in all.keys.iter().zip(left).zip(&mut first) {
                        if left {
                            continue;
                        }
                        *first = First::Released;
                        // As `release_lock` after its release.
                        self.gate.survived(keys.key());
                        (self.listener.wakeups).announce(keys.channel(), Announcement::Free(token));
                    }
                }
                Err(e) => {
                    tracing::debug!(server = %self.server, error = ?e, "leasehold: releasing a lock_all in one call failed; releasing key by key");
                    first.fill(First::MayHaveReleased);
                }
            }
        }
        let releases = all.keys.iter().zip(first).map(|(keys, first)| async move {
            let release = Release { keys, ..release };
            match first {
                First::Released => Ok(Owned::Yes),
                First::NotTried => self.release_lock(release).await,
                First::MayHaveReleased => self.release_after_failed(release).await,
            }
        });
        let mut outcome = Owned::Yes;
        let mut first_error = None;
        for result in join_all(releases).await {
            match result {
                Ok(owned) if outcome == Owned::Yes => outcome = owned,
                Ok(_) => {}
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(outcome),
        }
    }

    /// Whether a `lock_all`'s release may go first as `release_all.lua`:
    /// one server (the script is given the lock keys alone), no native
    /// conditional delete (each key one native command instead), a release
    /// that deletes now (no `at_least` keep), and no survival mark to leave
    /// (shortly after a restart or failover: `release.lua` leaves it). At
    /// most [`RELEASE_AT_ONCE`] keys.
    fn may_release_at_once(&self, all: &AllKeys, release: &Release<'_>) -> bool {
        (2..=RELEASE_AT_ONCE).contains(&all.keys.len())
            && release.keep.is_zero()
            && self.topology.one_slot()
            && self.topology.publish() == "PUBLISH"
            && !self.gate.offered().deletes()
            && all.keys.iter().all(|keys| {
                (self.gate)
                    .survival_mark(release.granted_at, || self.topology.slot_of(keys))
                    .is_none()
            })
    }

    /// One key's release after `release_all.lua` failed (its reply lost,
    /// the connection broken, an error): the call may have deleted the key,
    /// and someone else may hold it since, so "not ours" is what a resend
    /// after a lost reply finds, judged the same way (`resent_outcome`:
    /// gone while the lease is valid, on the server that granted it, and
    /// not by an operator, means our call deleted it).
    async fn release_after_failed(&self, release: Release<'_>) -> Result<Owned, LockError> {
        let (keys, token, granted_at, deadline) = (
            release.keys,
            release.token,
            release.granted_at,
            release.deadline,
        );
        let owned = self.release_lock(release).await?;
        if owned != Owned::No {
            return Ok(owned);
        }
        let owned = self
            .resent_outcome(keys, token, owned, granted_at, deadline)
            .await;
        if owned == Owned::Yes {
            // Released by the failed call: as `release_lock` after it.
            self.gate.survived(keys.key());
            (self.listener.wakeups).announce(keys.channel(), Announcement::Free(token));
        }
        Ok(owned)
    }

    /// Abandon an acquisition of a permit or rw-lock side.
    pub(super) async fn family_abandon(&self, keys: &LockKeys, token: &str) {
        let publish = self.topology.publish();
        let result =
            self.call(|mut con| async move {
                scripts::family_abandon(&mut con, keys, token, publish).await
            })
            .await;
        match result {
            // This client's own waiters hear at once (others by pub/sub).
            Ok((_, told)) => {
                for told in &told {
                    (self.listener.wakeups).announce(keys.channel(), Announcement::parse(told));
                }
            }
            Err(e) => {
                tracing::debug!(key = %keys.key(), error = ?e, "leasehold: could not abandon an acquisition; its traces lapse");
            }
        }
    }

    /// Renew a batch that holds permits or rw-lock sides: the locks through
    /// the topology's batched renewal as usual, the others by
    /// `family_renew.lua`, one call for all of them on one server, one per
    /// key on Cluster (a key's names share a slot); all sent at once.
    pub(super) async fn renew_with_family(
        &self,
        batch: &[Renewal],
    ) -> Result<Vec<Owned>, LockError> {
        let (shared, plain): (Vec<Indexed<'_>>, Vec<Indexed<'_>>) = batch
            .iter()
            .enumerate()
            .partition(|(_, item)| item.keys.kind.is_shared());
        let mut out = vec![Owned::Yes; batch.len()];
        // A lock_all lease is one renewal per key, all of the same token:
        // ours only while every key is.
        let mut items = Vec::with_capacity(plain.len());
        let mut owners = Vec::with_capacity(plain.len());
        for (at, item) in &plain {
            match &item.keys.kind {
                Kind::All(all) => {
                    for keys in &all.keys {
                        items.push(Renewal {
                            keys: Arc::new(keys.clone()),
                            ..(*item).clone()
                        });
                        owners.push(*at);
                    }
                }
                _ => {
                    items.push((*item).clone());
                    owners.push(*at);
                }
            }
        }
        if !items.is_empty() {
            let owned = self.renew_script(&items).await?;
            for (at, owned) in owners.iter().zip(owned) {
                if out[*at] == Owned::Yes {
                    out[*at] = owned;
                }
            }
        }
        let mut groups: BTreeMap<&str, Vec<Indexed<'_>>> = BTreeMap::new();
        for (at, item) in shared {
            let group = if self.topology.one_slot() {
                ""
            } else {
                item.keys.key()
            };
            groups.entry(group).or_default().push((at, item));
        }
        let calls = groups.values().map(|group| async move {
            let items: Vec<&Renewal> = group.iter().map(|(_, item)| *item).collect();
            let items = &items;
            let owned = self
                .call(|mut con| async move { scripts::family_renew(&mut con, items).await })
                .await;
            (group, owned)
        });
        for (group, owned) in join_all(calls).await {
            let owned = owned.map_err(|e| match e {
                ScriptError::Redis(e) => scripts::script_backend_error(&self.server, e),
                wrong @ ScriptError::WrongType { .. } => {
                    LockError::backend(&self.server, format!("{wrong:?}"))
                }
            })?;
            for ((at, _), owned) in group.iter().zip(owned) {
                out[*at] = owned;
            }
        }
        Ok(out)
    }
}
