//! A held lease and its whole lifetime: taken (with its validity deadline
//! and, with `renew`, the watchdog's renewals), shared by the guards of one
//! owner (re-entries), lost (refused, unreachable, server restarted...) or
//! given back by the last of them, in one release path shared by
//! `LockGuard::release` and `Drop`.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;
use tracing::Instrument;

use crate::backend::{Backend, LockKeys, Owned, RECORD_AFTER, Release, Renewal};
use crate::error::{LockError, LostCause};
use crate::limits::validate_ttl;
use crate::telemetry::{self, LeaseMetrics};
use crate::watchdog::{Renewable, Watchdog};

/// How a lease was asked for.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LeaseSettings {
    pub(crate) ttl: Duration,
    pub(crate) renew: bool,
    pub(crate) at_least: Option<Duration>,
    pub(crate) max_hold: Option<Duration>,
}

/// Who issued the lease: the client's backend and watchdog, and its id
/// (re-entry only within the same client).
#[derive(Clone)]
pub(crate) struct Issuer {
    pub(crate) client_id: u64,
    pub(crate) backend: Arc<dyn Backend>,
    pub(crate) watchdog: Arc<Watchdog>,
    /// Metrics of its leases carry a `key` label.
    pub(crate) metrics_key_label: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Held,
    Lost(LostCause),
    /// Given back (or being given back) by its last holder.
    Released,
}

#[derive(Debug, Clone, Copy)]
struct Status {
    state: State,
    /// Past this instant the lease may have expired on the server.
    valid_until: Instant,
    /// Watchdog calls (renewals, audits) that include the lease and have
    /// not come back: the release waits for them, so that none lands
    /// after it (one sent after the release would reset the expiry that
    /// `at_least` left to the full TTL).
    renewing: u32,
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

pub(crate) struct Lease {
    id: u64,
    issuer: Issuer,
    pub(crate) keys: Arc<LockKeys>,
    token: Arc<str>,
    pub(crate) fence: u64,
    settings: LeaseSettings,
    /// When the acquire request that won the lease was sent.
    acquired_at: Instant,
    /// How many guards (outermost + re-entries) share this lease.
    holders: AtomicUsize,
    /// Its fencing token is written on the server (false: taken on the
    /// fast path; the watchdog records it [`RECORD_AFTER`] the grant).
    recorded: AtomicBool,
    /// Handed over by a release for less than the TTL (a place's life, see
    /// `Backend::place_life`): the watchdog extends it
    /// to the full TTL a third of that life after the grant, unless the
    /// lease is given back first (a short hold never pays for it).
    handed: AtomicBool,
    status: Mutex<Status>,
    /// Signalled when the state leaves `Held` (not on renewals: a waiter in
    /// `lost()` re-reads the deadline when its sleep ends).
    state_changed: Notify,
    /// Signalled when the last watchdog call including it comes back.
    renewals_done: Notify,
    /// Held-lease gauge, hold time, loss and release counters.
    metrics: LeaseMetrics,
}

impl Lease {
    /// A lease just won by the attempt sent at `acquired_at`: its validity
    /// is counted from then (for `granted`, the lease the server holds: the
    /// TTL, or less for a lock handed over by a release, which the watchdog
    /// then extends), and the watchdog watches it from now on.
    pub(crate) fn start(
        issuer: Issuer,
        keys: Arc<LockKeys>,
        token: Arc<str>,
        fence: u64,
        settings: LeaseSettings,
        acquired_at: Instant,
        granted: Duration,
    ) -> Arc<Lease> {
        let kind = match keys.election_name() {
            Some(_) => telemetry::LeaseKind::Election,
            None => keys.kind.lease_kind(),
        };
        let metrics = LeaseMetrics::start(keys.key(), kind, issuer.metrics_key_label, acquired_at);
        // Plain locks and native `lock_all` grants only: the family's
        // scripts write their tokens.
        let recorded = !issuer.backend.records_lazily()
            || match &keys.kind {
                crate::backend::keys::Kind::Lock => false,
                crate::backend::keys::Kind::All(all) => !all.unwritten(),
                _ => true,
            };
        let lease = Arc::new(Lease {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            issuer,
            keys,
            token,
            fence,
            settings,
            acquired_at,
            holders: AtomicUsize::new(1),
            recorded: AtomicBool::new(recorded),
            handed: AtomicBool::new(granted < settings.ttl),
            status: Mutex::new(Status {
                state: State::Held,
                valid_until: acquired_at,
                renewing: 0,
            }),
            state_changed: Notify::new(),
            renewals_done: Notify::new(),
            metrics,
        });
        lease.status_mut().valid_until =
            lease.validity_from(acquired_at, granted.min(settings.ttl));
        let first_due = if granted < settings.ttl {
            Some(acquired_at + granted / 3)
        } else if !recorded {
            Some(acquired_at + RECORD_AFTER)
        } else {
            settings.renew.then(|| acquired_at + lease.renew_period())
        };
        let weak: Weak<dyn Renewable> = Arc::downgrade(&lease) as Weak<dyn Renewable>;
        lease
            .issuer
            .watchdog
            .track(lease.id, weak, first_due, lease.period());
        lease
    }

    /// The validity deadline of a lease of `ttl` whose request was sent at
    /// `sent_at`: ttl minus the clock-drift margin.
    fn validity_from(&self, sent_at: Instant, ttl: Duration) -> Instant {
        sent_at + ttl - self.issuer.backend.drift(ttl).min(ttl)
    }

    fn renew_period(&self) -> Duration {
        self.settings.ttl / 3
    }

    fn status_mut(&self) -> MutexGuard<'_, Status> {
        // Every update is a single field write: a panic cannot tear it.
        self.status.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn status(&self) -> Status {
        *self.status_mut()
    }

    /// The client that issued it.
    pub(crate) fn client_id(&self) -> u64 {
        self.issuer.client_id
    }

    pub(crate) fn is_held(&self) -> bool {
        let status = self.status();
        status.state == State::Held && Instant::now() < status.valid_until
    }

    /// Time left until the validity deadline (zero once lost).
    pub(crate) fn remaining(&self) -> Duration {
        let status = self.status();
        if status.state != State::Held {
            return Duration::ZERO;
        }
        status.valid_until.saturating_duration_since(Instant::now())
    }

    /// Why the deadline passed: renewal stopped at `max_hold`, renewals
    /// failed (unreachable), or there were none (expired).
    fn deadline_cause(&self, now: Instant) -> LostCause {
        if !self.settings.renew {
            LostCause::Expired
        } else if self.past_max_hold(now) {
            LostCause::MaxHold
        } else {
            LostCause::Unreachable
        }
    }

    fn past_max_hold(&self, now: Instant) -> bool {
        self.settings
            .max_hold
            .is_some_and(|max| now >= self.acquired_at + max)
    }

    /// The lease is gone, for `cause` (first cause wins). The watchdog
    /// drops it at its next look (this may run inside the watchdog's own
    /// bookkeeping, so it must not call back into it).
    /// Logged (WARN) and counted once, by `end_hold`.
    fn mark_lost(&self, cause: LostCause) {
        self.end_hold(State::Lost(cause));
    }

    fn end_hold(&self, state: State) -> bool {
        let changed = {
            let mut status = self.status_mut();
            let held = status.state == State::Held;
            if held {
                status.state = state;
            }
            held
        };
        if changed {
            // Recorded before waking anyone: whoever `lost()` wakes sees it
            // counted (and logged) already.
            match state {
                State::Lost(cause) => self.metrics.lost(self.keys.key(), self.fence, cause),
                State::Released | State::Held => self.metrics.end(),
            }
            self.state_changed.notify_waiters();
        }
        changed
    }

    /// Resolves once the lease is lost (or released), with the cause.
    pub(crate) async fn lost(&self) -> LostCause {
        loop {
            // Armed before reading the state, so a change in between wakes us.
            let changed = self.state_changed.notified();
            let mut changed = std::pin::pin!(changed);
            changed.as_mut().enable();
            let status = self.status();
            match status.state {
                State::Lost(cause) => return cause,
                State::Released => return LostCause::Refused,
                State::Held => {}
            }
            let now = Instant::now();
            if now >= status.valid_until {
                self.mark_lost(self.deadline_cause(now));
                continue;
            }
            tokio::select! {
                () = changed => {}
                // At the deadline, look again: a renewal may have moved it.
                () = tokio::time::sleep_until(status.valid_until) => {}
            }
        }
    }

    /// `Lost`, with the cause if known.
    pub(crate) fn lost_error(&self) -> LockError {
        let cause = match self.status().state {
            State::Lost(cause) => cause,
            _ => self.deadline_cause(Instant::now()),
        };
        LockError::Lost {
            key: self.keys.key().to_owned(),
            cause,
        }
    }

    pub(crate) fn not_held(&self) -> LockError {
        LockError::NotHeld {
            key: self.keys.key().to_owned(),
        }
    }

    /// Set the lease to `ttl` from now, if it is still ours.
    pub(crate) async fn extend(&self, ttl: Duration) -> Result<(), LockError> {
        let result = self.extend_unobserved(ttl).await;
        if let Err(error) = &result {
            telemetry::error(error, self.metrics.key());
        }
        result
    }

    async fn extend_unobserved(&self, ttl: Duration) -> Result<(), LockError> {
        validate_ttl(ttl)?;
        if self.status().state != State::Held {
            return Err(self.not_held());
        }
        let sent_at = Instant::now();
        let renewal = self.renewal_of(ttl);
        let outcome = self
            .issuer
            .backend
            .renew(std::slice::from_ref(&renewal))
            .await
            .map_err(|e| e.with_key(self.keys.key()))?;
        match outcome.first().copied().unwrap_or(Owned::No) {
            Owned::Yes => {
                self.set_validity(sent_at, ttl);
                self.handed.store(false, Ordering::Release);
                Ok(())
            }
            other => {
                self.mark_lost(if other == Owned::ForceReleased {
                    LostCause::ForceReleased
                } else {
                    LostCause::Refused
                });
                other.into_result(&self.keys)
            }
        }
    }

    /// A renewal of `ttl` sent at `sent_at` succeeded.
    fn set_validity(&self, sent_at: Instant, ttl: Duration) {
        let valid_until = self.validity_from(sent_at, ttl);
        let mut status = self.status_mut();
        if status.state == State::Held {
            status.valid_until = valid_until;
        }
    }

    fn renewal_of(&self, ttl: Duration) -> Renewal {
        Renewal {
            lease_id: self.id,
            keys: self.keys.clone(),
            token: self.token.clone(),
            ttl,
            record: None,
        }
    }

    fn is_recorded(&self) -> bool {
        self.recorded.load(Ordering::Acquire)
    }

    fn is_handed(&self) -> bool {
        self.handed.load(Ordering::Acquire)
    }

    /// One more guard of the same owner shares the lease (a re-entry).
    pub(crate) fn enter(&self) {
        self.holders.fetch_add(1, Ordering::AcqRel);
    }

    /// One guard is done with the lease. `true` when it was the last one,
    /// which must then release the lease ([`release`](Self::release)).
    pub(crate) fn exit(&self) -> bool {
        self.holders.fetch_sub(1, Ordering::AcqRel) == 1
    }

    /// Give the lease back to the backend (the last holder is gone): stop
    /// renewing, then delete the key, or with `at_least` leave it to expire
    /// at acquisition + `at_least`. Retried while the server asks to, until
    /// the validity ends.
    pub(crate) async fn release(&self) -> Result<(), LockError> {
        let span = telemetry::release_span(self.keys.key(), self.fence);
        let result = if span.is_disabled() {
            self.release_unobserved().await
        } else {
            self.release_unobserved().instrument(span.clone()).await
        };
        telemetry::release_outcome(&span, &result);
        match &result {
            Ok(()) => self.metrics.released(),
            Err(error) => telemetry::error(error, self.metrics.key()),
        }
        result
    }

    async fn release_unobserved(&self) -> Result<(), LockError> {
        let was_held = self.end_hold(State::Released);
        self.issuer.watchdog.untrack(self.id);
        // No renewal is sent from now on; one already on its way is let
        // land first (it goes to the same server, ahead of the release).
        self.renewals_settled().await;
        let keep = self
            .settings
            .at_least
            .map(|min| (self.acquired_at + min).saturating_duration_since(Instant::now()))
            .unwrap_or(Duration::ZERO);
        let deadline = self.status().valid_until;
        let outcome = self
            .issuer
            .backend
            .release(Release {
                keys: &self.keys,
                token: &self.token,
                keep,
                deadline,
                granted_at: self.acquired_at,
            })
            .await
            .map_err(|e| e.with_key(self.keys.key()))?;
        match outcome {
            Owned::Yes if !was_held => Err(self.not_held()),
            other => other.into_result(&self.keys),
        }
    }

    /// Resolves once no watchdog call including the lease is in flight.
    async fn renewals_settled(&self) {
        loop {
            let done = self.renewals_done.notified();
            let mut done = std::pin::pin!(done);
            done.as_mut().enable();
            if self.status().renewing == 0 {
                return;
            }
            done.await;
        }
    }

    /// [`release`](Self::release) in the background (from `Drop`).
    /// Without a runtime (or on one shutting down) the lease expires by
    /// itself.
    pub(crate) fn release_in_background(self: Arc<Self>) {
        self.issuer.watchdog.untrack(self.id);
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                if let Err(error) = self.release().await {
                    tracing::debug!(%error, "leasehold: background release of a dropped guard failed");
                }
            });
        }
    }
}

impl Renewable for Lease {
    fn renewal(&self, now: Instant, audit: bool) -> Option<Renewal> {
        // Decided and counted in flight in one step with the state: the
        // release either stops this renewal or waits for it.
        let mut status = self.status_mut();
        if status.state != State::Held {
            return None;
        }
        let record = (!self.is_recorded()).then_some((self.fence, self.settings.ttl));
        let ttl = if self.is_handed() {
            // Handed over for a place's life: extended to the full TTL
            // (whether or not it renews later).
            self.settings.ttl
        } else if record.is_some() && !audit {
            // Due to have its fencing token written down: checked only (a
            // renewal, if any, follows a period later).
            Duration::ZERO
        } else if self.settings.renew && !self.past_max_hold(now) {
            self.settings.ttl
        } else if audit {
            // Checked only: the key keeps its expiry (setting it to the
            // validity left would take the drift allowance off the lease).
            Duration::ZERO
        } else {
            return None;
        };
        status.renewing += 1;
        let mut renewal = self.renewal_of(ttl);
        renewal.record = record;
        Some(renewal)
    }

    fn renewal_done(&self) {
        let settled = {
            let mut status = self.status_mut();
            status.renewing = status.renewing.saturating_sub(1);
            status.renewing == 0
        };
        if settled {
            self.renewals_done.notify_waiters();
        }
    }

    fn period(&self) -> Option<Duration> {
        if self.is_handed() {
            // Tried again soon if the extension failed: the short lease
            // runs out at a place's life.
            Some(self.issuer.backend.place_life() / 3)
        } else if self.settings.renew {
            Some(self.renew_period())
        } else {
            // Looked at once more, to write its fencing token down.
            (!self.is_recorded()).then_some(RECORD_AFTER)
        }
    }

    fn lease_id(&self) -> u64 {
        self.id
    }

    fn deadline(&self) -> Instant {
        self.status().valid_until
    }

    fn is_live(&self) -> bool {
        self.status().state == State::Held
    }

    fn check_deadline(&self, now: Instant) -> bool {
        if now >= self.status().valid_until {
            self.mark_lost(self.deadline_cause(now));
            return true;
        }
        false
    }

    fn renewed(&self, sent_at: Instant, renewal: &Renewal) {
        if renewal.record.is_some() {
            self.recorded.store(true, Ordering::Release);
        }
        // A lease without `renew` (or past its max_hold) was only checked:
        // its deadline stays, unless this was a handed lease's extension.
        let extended = !renewal.ttl.is_zero() && self.handed.swap(false, Ordering::AcqRel);
        if (self.settings.renew || extended) && !renewal.ttl.is_zero() {
            self.set_validity(sent_at, renewal.ttl);
        }
    }

    fn refused(&self, cause: LostCause) {
        if cause == LostCause::Refused {
            self.metrics.renewal_failed();
        }
        self.mark_lost(cause);
    }

    fn renewal_failed(&self) {
        self.metrics.renewal_failed();
    }
}

impl std::fmt::Debug for Lease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lease")
            .field("key", &self.keys.key())
            .field("fence", &self.fence)
            .field("settings", &self.settings)
            .field("status", &self.status())
            .finish_non_exhaustive()
    }
}
