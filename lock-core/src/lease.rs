//! The shared state of one held lease: who holds it, until when it is valid,
//! and whether it has been lost or released. Guards, the watchdog and the
//! reentrancy table all look at the same [`Lease`].

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::backend::{LockKeys, Owned, Renewal};
use crate::client::ClientInner;
use crate::error::LockError;
use crate::reentrancy::Owner;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum State {
    Held,
    /// A renewal was refused, or the validity passed.
    Lost,
    /// Given back (or being given back) by its owner.
    Released,
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct Status {
    pub(crate) state: State,
    /// Past this instant the lease may have expired on the server.
    pub(crate) valid_until: Instant,
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

pub(crate) struct Lease {
    pub(crate) id: u64,
    pub(crate) client: Arc<ClientInner>,
    pub(crate) keys: Arc<LockKeys>,
    pub(crate) token: Arc<str>,
    pub(crate) fence: u64,
    pub(crate) owner: Owner,
    pub(crate) ttl: Duration,
    pub(crate) renew: bool,
    /// When the acquire request that won the lease was sent.
    pub(crate) acquired_at: Instant,
    pub(crate) at_least: Option<Duration>,
    /// How many guards (outermost + re-entries) share this lease.
    pub(crate) holders: AtomicUsize,
    status: Mutex<Status>,
    /// Signalled when `status.state` leaves `Held` (not on renewals: a
    /// waiter in `lost()` re-reads the deadline when its sleep ends).
    state_changed: Notify,
}

impl Lease {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        client: Arc<ClientInner>,
        keys: Arc<LockKeys>,
        token: Arc<str>,
        fence: u64,
        owner: Owner,
        ttl: Duration,
        renew: bool,
        acquired_at: Instant,
        at_least: Option<Duration>,
    ) -> Lease {
        let valid_until = acquired_at + ttl - client.backend.drift(ttl).min(ttl);
        Lease {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            client,
            keys,
            token,
            fence,
            owner,
            ttl,
            renew,
            acquired_at,
            at_least,
            holders: AtomicUsize::new(1),
            status: Mutex::new(Status {
                state: State::Held,
                valid_until,
            }),
            state_changed: Notify::new(),
        }
    }

    fn status_mut(&self) -> MutexGuard<'_, Status> {
        // Every update is a single field write: a panic cannot tear it.
        self.status.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn status(&self) -> Status {
        *self.status_mut()
    }

    pub(crate) fn is_held(&self) -> bool {
        let status = self.status();
        status.state == State::Held && Instant::now() < status.valid_until
    }

    /// The validity deadline after a successful renewal sent at `sent_at`.
    pub(crate) fn renewed(&self, sent_at: Instant, ttl: Duration) {
        let valid_until = sent_at + ttl - self.client.backend.drift(ttl).min(ttl);
        let mut status = self.status_mut();
        if status.state == State::Held {
            status.valid_until = valid_until;
        }
    }

    /// The lease is gone (refused renewal, or validity passed).
    pub(crate) fn mark_lost(&self) {
        self.set_state_from_held(State::Lost);
    }

    fn mark_released(&self) {
        self.set_state_from_held(State::Released);
    }

    fn set_state_from_held(&self, state: State) {
        let changed = {
            let mut status = self.status_mut();
            let held = status.state == State::Held;
            if held {
                status.state = state;
            }
            held
        };
        if changed {
            self.state_changed.notify_waiters();
        }
    }

    /// Resolves once the lease is lost (or released).
    pub(crate) async fn lost(&self) {
        loop {
            // Armed before reading the state, so a change in between wakes us.
            let changed = self.state_changed.notified();
            let mut changed = std::pin::pin!(changed);
            changed.as_mut().enable();
            let status = self.status();
            if status.state != State::Held {
                return;
            }
            if Instant::now() >= status.valid_until {
                self.mark_lost();
                return;
            }
            tokio::select! {
                () = changed => {}
                // At the deadline, look again: a renewal may have moved it.
                () = tokio::time::sleep_until(status.valid_until) => {}
            }
        }
    }

    pub(crate) async fn extend(&self, ttl: Duration) -> Result<(), LockError> {
        crate::request::validate_ttl(ttl)?;
        if self.status().state != State::Held {
            return Err(self.not_held());
        }
        let sent_at = Instant::now();
        let batch = [Renewal {
            keys: self.keys.clone(),
            token: self.token.clone(),
            ttl,
        }];
        let outcome = self
            .client
            .backend
            .renew(&batch)
            .await
            .map_err(|e| e.with_key(&self.keys.name))?;
        match outcome.first().copied().unwrap_or(Owned::No) {
            Owned::Yes => {
                self.renewed(sent_at, ttl);
                Ok(())
            }
            other => {
                self.mark_lost();
                other.into_result(&self.keys)
            }
        }
    }

    /// One guard is done with the lease. The last one gives it back.
    /// Returns `true` when this was the last holder.
    pub(crate) fn drop_holder(&self) -> bool {
        self.holders.fetch_sub(1, Ordering::AcqRel) == 1
    }

    /// Give the lease back to the backend (the last holder is gone).
    pub(crate) async fn release(&self) -> Result<(), LockError> {
        self.mark_released();
        let keep = self
            .at_least
            .map(|min| (self.acquired_at + min).saturating_duration_since(Instant::now()))
            .unwrap_or(Duration::ZERO);
        let outcome = self
            .client
            .backend
            .release(&self.keys, &self.token, keep)
            .await
            .map_err(|e| e.with_key(&self.keys.name))?;
        outcome.into_result(&self.keys)
    }

    pub(crate) fn not_held(&self) -> LockError {
        LockError::NotHeld {
            key: self.keys.name.clone(),
        }
    }
}

impl std::fmt::Debug for Lease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lease")
            .field("key", &self.keys.name)
            .field("fence", &self.fence)
            .field("ttl", &self.ttl)
            .field("renew", &self.renew)
            .field("status", &self.status())
            .finish_non_exhaustive()
    }
}
