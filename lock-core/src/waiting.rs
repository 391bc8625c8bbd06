//! Waiting for a busy lock without polling, in turn, and leaving no trace
//! when the wait ends or is cancelled.
//!
//! A [`Waiter`] is one acquisition in progress. Each attempt that finds the
//! lock taken keeps its place in the lock's line, kept in Redis next to the
//! lock (first come, first served, across every client and instance). After
//! the first busy reply the waiter joins its client's local
//! [`Wakeups`](crate::backend::wakeups::Wakeups) and listens for the lock's
//! release announcements, then looks again at once (a release may have
//! come before it listened); where another waiter of its client already
//! listens on the lock, it joins them before its first attempt instead (no
//! round trip: the subscription is there) and needs no second look. It
//! then alternates between one attempt and a sleep that ends at whichever
//! comes first:
//!
//! - its turn: a release hands the lock straight to the first in line
//!   (`grant:…`, when its place carries its lease length: see
//!   `release.lua`; a semaphore's or rw lock's release hands it to every
//!   waiter it admits, `family_release.lua`), and that waiter has it
//!   without another round trip,
//!   valid from its last attempt's sending plus the server time from that
//!   attempt to the grant; or a release names the first in line
//!   (`next:<token>`), and only that waiter is woken to try, in whichever
//!   client it lives; if the grant's announcement is lost, the waiter's next
//!   attempt (at the latest when its sleep ends) finds the lock its own; on Redlock, which
//!   keeps no line, every release is announced (`free:<token>`) and the
//!   client's first local waiter is woken. A release that nobody waits for
//!   in line announces nothing (no `PUBLISH`). Releases
//!   made through the same client wake at once, others arrive by pub/sub;
//! - the moment the holder's lease runs out, or the place of the first in
//!   line lapses (the busy reply says when), for holders and waiters that
//!   crash or are paused instead of releasing or leaving. A place is kept
//!   for the sleep its waiter was told plus 2 s, so a paused process holds
//!   up the line for at most its lease plus that (the fault suite freezes
//!   one with `SIGSTOP` and checks that the others go on);
//! - the end of the caller's `wait` budget.
//!
//! The wake-up is armed *before* each attempt, so a release that lands between
//! the attempt and the sleep is never missed.
//!
//! Dropped without the lock (its wait ran out, it failed, or the caller's
//! future was dropped at any await point), a waiter leaves no trace: it
//! leaves the local register and stops listening at once, and removes its
//! place in line, and the lock if an attempt whose reply never came got it,
//! in the background right away (one script call; the next in line is told
//! if the lock is free). (The in-memory backend and Redlock keep no line in
//! the store: there a release wakes the first local waiter.)

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::sync::futures::OwnedNotified;
use tokio::time::Instant;

use crate::backend::keys::Kind;
use crate::backend::{Acquired, Attempt, Backend, LockKeys, abandon_in_background};
use crate::error::LockError;

/// How long an acquisition that gives up waits for its traces to be
/// removed before it answers (then they go in the background).
const LEAVE_WITHIN: Duration = Duration::from_millis(250);

/// One acquisition in progress.
pub(crate) struct Waiter<'a> {
    backend: &'a Arc<dyn Backend>,
    keys: &'a LockKeys,
    token: &'a str,
    /// Redis may hold a trace of this acquisition: a place in line, or a
    /// lock from an attempt whose reply never came.
    traces: bool,
    /// Registered in the client's local wake-ups.
    wakeup: Option<Arc<Notify>>,
    /// A subscription was requested (matched by `unlisten` on drop).
    listening: bool,
    /// An attempt went as the fast pipeline: its `SET` may have taken the
    /// lock, so later attempts go in claimed mode (`acquire.lua`).
    fast_sent: bool,
    /// The lock is ours and handed to a lease: nothing to clean up.
    done: bool,
    /// When it started: its attempts are named by their sending, in µs
    /// since (a release that hands the lock on names one).
    started: Instant,
    /// It stands in the lock's line with this lease, as its backend's
    /// restart gate knows (see `Backend::stand_in_line`).
    standing: Option<Duration>,
}

impl<'a> Waiter<'a> {
    /// Started at `started` (a reading of the clock the caller also uses
    /// for its deadline and first attempt).
    pub(crate) fn new(
        backend: &'a Arc<dyn Backend>,
        keys: &'a LockKeys,
        token: &'a str,
        started: Instant,
    ) -> Self {
        Waiter {
            backend,
            keys,
            token,
            traces: false,
            wakeup: None,
            listening: false,
            fast_sent: false,
            done: false,
            started,
            standing: None,
        }
    }

    /// When it started.
    pub(crate) fn started(&self) -> Instant {
        self.started
    }

    /// One attempt, sent at `sent_at`; with `in_line`, a busy reply keeps
    /// our place in line.
    pub(crate) async fn attempt(
        &mut self,
        ttl: Duration,
        in_line: bool,
        sent_at: Instant,
    ) -> Result<Acquired, LockError> {
        let sent_us = u64::try_from(sent_at.saturating_duration_since(self.started).as_micros())
            .unwrap_or(u64::MAX);
        // Set before sending: dropped before the reply, the attempt may
        // have taken the lock or a place.
        self.traces = true;
        // The fast pipeline until this waiter listens (a busy lock it
        // waits for goes to the script).
        let fast = !self.is_listening();
        self.fast_sent |= fast;
        let reply = self
            .backend
            .acquire(Attempt {
                keys: self.keys,
                token: self.token,
                ttl,
                in_line,
                fence_floor: None,
                fast,
                after_fast: self.fast_sent,
                sent_us,
            })
            .await;
        if matches!(reply, Ok(Acquired::Busy { .. })) && in_line && self.standing.is_none() {
            // In line now: asking for the lock until it ends, between its
            // attempts too.
            self.backend.stand_in_line(self.keys, ttl, true);
            self.standing = Some(ttl);
        }
        if matches!(reply, Ok(Acquired::Busy { .. }))
            && !in_line
            && !self.backend.busy_leaves_traces()
        {
            // A one-try busy reply leaves nothing behind.
            self.traces = false;
        }
        reply
    }

    /// Whether this waiter already hears releases.
    pub(crate) fn is_listening(&self) -> bool {
        self.wakeup.is_some()
    }

    /// Whether other waiters of this client already listen for this lock's
    /// releases, in its line (a busy lock): joining them before the first
    /// attempt costs no round trip (their subscription is there), and a
    /// busy reply then needs no second look.
    pub(crate) fn others_listen(&self) -> bool {
        self.backend.keeps_places() && self.backend.wakeups().has_waiters(self.keys.channel())
    }

    /// Join the local wake-ups and listen for the lock's releases. Without
    /// a subscription the waiter still wakes when the holder's lease runs
    /// out, and on releases made through this client.
    ///
    /// A setup mistake (an ACL refusal: the user may not subscribe to the
    /// lock's channel) is returned instead: no retry fixes it, and it would
    /// otherwise go unseen while every wait lasts until the lease runs out.
    pub(crate) async fn listen(&mut self) -> Result<(), LockError> {
        let wakeup = self.backend.wakeups().join(self.keys.channel(), self.token);
        // A `lock_all` waiter waits in the line of whichever of its keys is
        // busy: it hears the releases of all of them.
        for other in others(self.keys) {
            (self.backend.wakeups()).join_with(other.channel(), self.token, wakeup.clone());
        }
        self.wakeup = Some(wakeup);
        // Before the await: dropped while subscribing, the subscription
        // (if it happens) is undone by `drop`.
        self.listening = true;
        for keys in std::iter::once(self.keys).chain(others(self.keys)) {
            if let Err(error) = self.backend.listen(keys).await {
                if error.is_misconfigured() {
                    return Err(error);
                }
                tracing::debug!(%error, key = %keys.key(), "leasehold: no release announcements, waking at expiry");
            }
        }
        Ok(())
    }

    /// The wake-up for the next sleep, armed now (before the attempt).
    pub(crate) fn arm(&self) -> Option<Pin<Box<OwnedNotified>>> {
        let mut notified = Box::pin(self.wakeup.clone()?.notified_owned());
        notified.as_mut().enable();
        Some(notified)
    }

    /// Sleep until woken by `armed`, or `until`. A waiter with a place in
    /// line (`in_line`) keeps it alive meanwhile, every third of its
    /// client's place life (`Backend::place_life`): if its process dies or freezes, the place lapses
    /// within that and the line goes on without it. A place found gone (it
    /// lapsed, or a release handed this waiter the lock) ends the sleep.
    pub(crate) async fn sleep(
        &self,
        armed: Option<Pin<Box<OwnedNotified>>>,
        until: Instant,
        in_line: bool,
    ) {
        let keep = in_line && self.traces && self.backend.keeps_places();
        let keep_every = self.backend.place_life() / 3;
        let mut armed = armed;
        let mut until = until;
        loop {
            let wake = if keep {
                until.min(Instant::now() + keep_every)
            } else {
                until
            };
            match armed.as_mut() {
                Some(notified) => {
                    tokio::select! {
                        () = notified.as_mut() => return,
                        () = tokio::time::sleep_until(wake) => {}
                    }
                }
                None => tokio::time::sleep_until(wake).await,
            }
            if wake >= until {
                return;
            }
            match self.backend.keep_place(self.keys, self.token).await {
                // A lease handed to a waiter before this one (for a place's
                // life, until its client extends it) may end sooner than
                // the lease this waiter slept on: wake then.
                Ok(Some(left)) => {
                    if let Some(ends) = Instant::now().checked_add(left) {
                        until = until.min(ends);
                    }
                }
                Ok(None) => return,
                Err(error) => {
                    // Kept by the next attempt, or lapsed: either way the
                    // wait goes on.
                    tracing::debug!(%error, key = %self.keys.key(), "leasehold: could not keep a place in line");
                }
            }
        }
    }

    /// The lock a release handed to this waiter (`grant:`) since it last
    /// looked, if one did: its fencing token, and the earliest instant here
    /// the grant may have happened (its lease counts from then).
    ///
    /// A `lock_all` waiter is handed every key at once, with one fencing
    /// token for all, by a release of any of them: the grant is heard on
    /// that key's channel, and recorded for every key.
    pub(crate) fn take_grant(&self) -> Option<(u64, Instant)> {
        self.wakeup.as_ref()?;
        let wakeups = self.backend.wakeups();
        let grant = std::iter::once(self.keys)
            .chain(others(self.keys))
            .find_map(|keys| wakeups.take_grant(keys.channel(), self.token))?;
        if let Kind::All(all) = &self.keys.kind {
            all.granted(vec![grant.fence; all.keys.len()]);
        }
        let sent = (self.started).checked_add(Duration::from_micros(grant.attempt_sent_us))?;
        Some((grant.fence, granted_at(sent, grant.since_attempt_ms)))
    }

    /// Whether a lock handed to this waiter may be taken as granted now
    /// (the gate's rules, as for an attempt's grant).
    pub(crate) async fn admit_grant(&self, ttl: Duration) -> Result<(), LockError> {
        self.backend.admit_grant(self.keys, ttl).await
    }

    /// Gives up without the lock: removes this waiter's traces (its place in
    /// line, a grant handed to it is passed on) before returning, instead of
    /// in the background when dropped. A process that exits right after a
    /// busy answer (a command-line tool, a cron job) would otherwise leave
    /// its place to hold up the line until it expires.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropped before the reply, the waiter's drop still
    /// removes the traces in the background.
    pub(crate) async fn leave(&mut self) {
        // Bounded: a node that does not answer (a stalled Redlock master)
        // must not hold up a decided answer; then the drop's background
        // cleanup goes on, and a place left lapses within its life anyway.
        if self.traces
            && !self.done
            && tokio::time::timeout(LEAVE_WITHIN, self.backend.abandon(self.keys, self.token))
                .await
                .is_ok()
        {
            self.traces = false;
        }
    }

    /// The lock is ours and held by a lease: leave quietly.
    pub(crate) fn done(mut self) {
        self.done = true;
    }
}

impl Drop for Waiter<'_> {
    fn drop(&mut self) {
        if let Some(ttl) = self.standing.take() {
            self.backend.stand_in_line(self.keys, ttl, false);
        }
        for keys in std::iter::once(self.keys).chain(others(self.keys)) {
            if self.wakeup.is_some() {
                // One that leaves without the lock passes its local turn on.
                self.backend
                    .wakeups()
                    .leave(keys.channel(), self.token, !self.done);
            }
            if self.listening {
                self.backend.unlisten(keys);
            }
        }
        if self.traces && !self.done {
            abandon_in_background(self.backend, self.keys, self.token);
        }
    }
}

/// The earliest local instant a lock handed to a waiter may have been
/// granted (SPEC semantic 3): the attempt its place was last written by was
/// sent at `sent`, the server ran it and, `since_ms` of server time later,
/// the grant; so the grant was no earlier than `sent + since_ms` here (and
/// never later than now). Less one millisecond: both server readings are
/// whole milliseconds (truncated), so the server time between them may be
/// up to a millisecond short of their difference.
fn granted_at(sent: Instant, since_ms: i64) -> Instant {
    let since_ms = since_ms.saturating_sub(1);
    let since = Duration::from_millis(since_ms.unsigned_abs());
    let at = if since_ms >= 0 {
        sent.checked_add(since).unwrap_or(sent)
    } else {
        sent.checked_sub(since).unwrap_or(sent)
    };
    at.min(Instant::now())
}

/// The keys of a `lock_all` after its first (whose names `keys` are); none
/// for any other request.
fn others(keys: &LockKeys) -> impl Iterator<Item = &LockKeys> {
    let rest: &[LockKeys] = match &keys.kind {
        Kind::All(all) => all.keys.get(1..).unwrap_or_default(),
        _ => &[],
    };
    rest.iter()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_handed_grant_counts_from_the_named_attempt_plus_the_server_time() {
        let now = Instant::now();
        let sent = now.checked_sub(Duration::from_secs(1)).unwrap_or(now);
        let waited = now.duration_since(sent);
        let ms = |d: Duration| i64::try_from(d.as_millis()).unwrap_or(0);
        // 200 ms of server time from the attempt to the grant (whole
        // milliseconds: it may have been 199.001).
        if waited >= Duration::from_millis(200) {
            assert_eq!(granted_at(sent, 200), sent + Duration::from_millis(199));
        }
        // Never later than now (a server clock running fast).
        assert!(granted_at(sent, ms(waited) + 60_000) <= Instant::now());
        // A server clock that stepped back: earlier, not later.
        assert!(granted_at(sent, -5) <= sent);
    }
}
