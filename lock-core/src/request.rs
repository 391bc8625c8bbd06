//! [`LockRequest`]: how to take one lock (TTL, renewal, waiting, minimum
//! and maximum hold), and the flow behind `acquire`, `try_acquire` and `run`:
//! validate, re-enter or attempt, wait (see [`crate::waiting`]), start the
//! lease (see [`crate::lease`]).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tracing::Instrument;

use crate::backend::{Acquired, Backend, LockKeys};
use crate::config::ClientSettings;
use crate::error::LockError;
use crate::guard::LockGuard;
use crate::lease::{Issuer, Lease, LeaseSettings};
use crate::limits::{MAX_WAIT, validate_key, validate_span, validate_ttl};
use crate::reentrancy;
use crate::shape::Shape;
use crate::standing::Candidacies;
use crate::telemetry::{AcquireOutcome, Acquisition};
use crate::waiting::Waiter;
use crate::watchdog::Watchdog;

/// The first pause after a failed attempt (Redis unreachable) while the
/// `wait` budget lasts; doubled up to [`MAX_ATTEMPT_RETRY_DELAY`].
const FIRST_ATTEMPT_RETRY_DELAY: Duration = Duration::from_millis(20);
const MAX_ATTEMPT_RETRY_DELAY: Duration = Duration::from_millis(500);

/// What a request needs from its client: settings, backend, watchdog.
pub(crate) struct Shared {
    pub(crate) settings: ClientSettings,
    pub(crate) backend: Arc<dyn Backend>,
    pub(crate) watchdog: Arc<Watchdog>,
    /// The elections this client campaigns for in the background
    /// (`#[leader_only]`).
    pub(crate) candidacies: Candidacies,
}

/// A lock to take: built by [`LockClient::lock`](crate::LockClient::lock),
/// configured with the builder methods, consumed by [`acquire`](Self::acquire),
/// [`try_acquire`](Self::try_acquire) or [`run`](Self::run).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), leasehold::LockError> {
/// use std::time::Duration;
/// let client = leasehold::LockClient::in_memory();
///
/// let guard = client
///     .lock("doc:request")
///     .ttl(Duration::from_secs(10))  // lease length (default 30 s)
///     .renew(true)                   // the watchdog keeps it alive until release
///     .wait(Duration::from_secs(5))  // wait up to 5 s if busy (default: one try)
///     .acquire()
///     .await?;
/// # guard.release().await?;
/// # Ok(()) }
/// ```
#[must_use = "a LockRequest does nothing until acquired"]
#[derive(Clone)]
pub struct LockRequest {
    client: Arc<Shared>,
    key: String,
    ttl: Duration,
    renew: bool,
    wait: Duration,
    at_least: Option<Duration>,
    max_hold: Option<Duration>,
    replicas: usize,
    /// A lock, a semaphore permit, a rw-lock side, or several locks.
    shape: Shape,
}

impl std::fmt::Debug for LockRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockRequest")
            .field("key", &self.key)
            .field("ttl", &self.ttl)
            .field("renew", &self.renew)
            .field("wait", &self.wait)
            .field("at_least", &self.at_least)
            .field("max_hold", &self.max_hold)
            .field("replicas", &self.replicas)
            .field("shape", &self.shape)
            .finish()
    }
}

impl LockRequest {
    pub(crate) fn new(client: Arc<Shared>, key: String) -> LockRequest {
        LockRequest::shaped(client, key, Shape::Lock)
    }

    /// A request for `key` (the first sorted key of `lock_all`) of `shape`.
    pub(crate) fn shaped(client: Arc<Shared>, key: String, shape: Shape) -> LockRequest {
        let ttl = client.settings.default_ttl;
        let replicas = client.settings.replica_sync.replicas;
        LockRequest {
            client,
            key,
            ttl,
            renew: false,
            wait: Duration::ZERO,
            at_least: None,
            max_hold: None,
            replicas,
            shape,
        }
    }

    /// The lease length (default 30 s, or the client's default). Without
    /// [`renew`](Self::renew), the lock is lost after this long.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// Keep the lease alive until release: the client's watchdog renews it
    /// every `ttl / 3`. If the process dies, the lock expires within `ttl`.
    pub fn renew(mut self, on: bool) -> Self {
        self.renew = on;
        self
    }

    /// How long to wait for a busy lock (default zero: one try). The waiter is
    /// woken by the release or when the holder's lease runs out; it does not
    /// poll. Waits longer than [`MAX_WAIT`] (such as `Duration::MAX`, "wait
    /// as long as it takes") are capped to it.
    pub fn wait(mut self, max: Duration) -> Self {
        self.wait = max.min(MAX_WAIT);
        self
    }

    /// Keep the key at least this long after acquisition, even if released
    /// sooner: for skip-if-locked jobs on several instances whose clocks
    /// differ slightly, so that a fast run is not repeated by a late instance.
    /// Zero turns it off.
    pub fn at_least(mut self, min: Duration) -> Self {
        self.at_least = (!min.is_zero()).then_some(min);
        self
    }

    /// Stop renewing this long after acquisition: the lease then runs out,
    /// the guard is lost and a `run` body (or `#[distributed_lock]`
    /// function) is dropped with [`LockError::Lost`]. A bound on how long a
    /// renewed job may keep a lock. Zero turns it off.
    pub fn max_hold(mut self, max: Duration) -> Self {
        self.max_hold = (!max.is_zero()).then_some(max);
        self
    }

    /// Require this acquisition to reach `replicas` replicas (Redis `WAIT`),
    /// overriding the client's [`replica_sync`](crate::LockClientBuilder::replica_sync)
    /// count; 0 turns it off. Too few acknowledgements within the client's
    /// sync timeout: the lock is released and [`LockError::ReplicaSync`] returned.
    pub fn replica_sync(mut self, replicas: usize) -> Self {
        self.replicas = replicas;
        self
    }

    /// Take the lock: `Err(LockError::Busy)` if it is still taken after
    /// [`wait`](Self::wait).
    ///
    /// Inside the body of [`run`](Self::run) (or a `#[distributed_lock]`
    /// function) that holds the same lock through the same client, this
    /// re-enters at once, with no round trip.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropped at any await point, it leaves no lock that
    /// nobody will release, no place in the line of waiters, no
    /// subscription, no renewal and no re-entry record. Cleanup (one script
    /// call) starts at once in the background.
    pub async fn acquire(self) -> Result<LockGuard, LockError> {
        let mut observed = Acquisition::start(
            &self.key,
            self.shape.lease_kind(),
            self.wait,
            self.ttl,
            self.client.settings.metrics_key_label,
        );
        // Entering a disabled span on every poll costs too: skip it.
        let result = if observed.span().is_disabled() {
            self.acquire_observed(&mut observed).await
        } else {
            let span = observed.span().clone();
            self.acquire_observed(&mut observed).instrument(span).await
        };
        let outcome = match &result {
            Ok(guard) => AcquireOutcome::Acquired {
                fence: guard.fencing_token(),
            },
            Err(error) => AcquireOutcome::Failed(error),
        };
        observed.finish(&self.key, outcome);
        result
    }

    /// [`acquire`](Self::acquire), counting attempts and waits in `observed`.
    async fn acquire_observed(&self, observed: &mut Acquisition) -> Result<LockGuard, LockError> {
        self.shape.validate()?;
        validate_key(&self.key)?;
        validate_ttl(self.ttl)?;
        if let Some(min) = self.at_least {
            validate_span("at_least", min)?;
        }
        if let Some(max) = self.max_hold {
            validate_span("max_hold", max)?;
        }
        crate::limits::require_runtime("acquire")?;

        let keys = Arc::new(self.shape.keys(&self.client.settings.prefix, &self.key));
        // Re-entry: an enclosing `run` body of this task holds it.
        if let Some(lease) = reentrancy::find(self.client.settings.id, &keys) {
            lease.enter();
            observed.reentered();
            if lease.keys.kind != keys.kind {
                // One key of an enclosing `lock_all`.
                return Ok(LockGuard::within(lease, self.key.clone()));
            }
            return Ok(LockGuard::new(lease));
        }

        let token: Arc<str> = crate::token::owner_token(&self.client.settings.name)?;
        let mut waiter = Waiter::new(&self.client.backend, &keys, &token, Instant::now());
        let (fence, acquired_at, granted) =
            self.attempt_until_acquired(&mut waiter, observed).await?;
        if self.replicas > 0 {
            self.sync_replicas(&keys, &token).await?;
        }
        let issuer = Issuer {
            client_id: self.client.settings.id,
            backend: self.client.backend.clone(),
            watchdog: self.client.watchdog.clone(),
            metrics_key_label: self.client.settings.metrics_key_label,
        };
        let settings = LeaseSettings {
            ttl: self.ttl,
            renew: self.renew,
            at_least: self.at_least,
            max_hold: self.max_hold,
        };
        let lease = Lease::start(
            issuer,
            keys.clone(),
            token.clone(),
            fence,
            settings,
            acquired_at,
            granted,
        );
        waiter.done();
        Ok(LockGuard::new(lease))
    }

    /// One attempt (the `wait` setting is ignored): `Ok(None)` when the lock
    /// is busy, an error only when something is wrong.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, like [`acquire`](Self::acquire).
    pub async fn try_acquire(self) -> Result<Option<LockGuard>, LockError> {
        match self.wait(Duration::ZERO).acquire().await {
            Ok(guard) => Ok(Some(guard)),
            Err(LockError::Busy { .. }) => Ok(None),
            Err(other) => Err(other),
        }
    }

    /// Acquire, run `body` while holding the lock, release.
    ///
    /// If the lease is lost while `body` runs (a renewal refused, its server
    /// restarted, the validity passed without [`renew`](Self::renew), or
    /// [`max_hold`](Self::max_hold) reached), `body` is dropped at its next
    /// await point and `Err(LockError::Lost)` is returned with the cause. A
    /// failure to release after `body` completed is logged, not returned:
    /// the work is done and the lease expires on its own.
    ///
    /// Inside `body`, acquiring the same lock through the same client
    /// re-enters (no round trip), and [`fencing_token`](crate::fencing_token)
    /// returns this lock's token.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), leasehold::LockError> {
    /// let client = leasehold::LockClient::in_memory();
    /// let total = client.lock("doc:run").renew(true).run(async { 40 + 2 }).await?;
    /// assert_eq!(total, 42);
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropped while acquiring, see [`acquire`](Self::acquire);
    /// dropped while `body` runs, `body` is dropped and the lock released
    /// in the background at once.
    pub async fn run<F: Future>(self, body: F) -> Result<F::Output, LockError> {
        let guard = self.acquire().await?;
        let lease = guard.lease().clone();
        let output = reentrancy::holding(&lease, async {
            tokio::select! {
                biased;
                _ = lease.lost() => None,
                output = body => Some(output),
            }
        })
        .await;
        match output {
            Some(output) => {
                if let Err(error) = guard.release().await {
                    tracing::warn!(%error, "leasehold: release after the body finished failed");
                }
                Ok(output)
            }
            None => {
                let error = lease.lost_error();
                tracing::warn!(%error, "leasehold: lease lost while the body ran; the body was stopped");
                Err(error)
            }
        }
    }

    /// Attempt, and while the `wait` budget lasts, sleep until a release or
    /// the holder's expiry, then attempt again. Returns the fence, the
    /// instant the winning attempt was sent (or the grant was made), and
    /// the lease the server holds from then: the TTL, or a place's life
    /// for a longer lock handed over by a release.
    async fn attempt_until_acquired(
        &self,
        waiter: &mut Waiter<'_>,
        observed: &mut Acquisition,
    ) -> Result<(u64, Instant, Duration), LockError> {
        // One reading of the clock for the start, the deadline and the
        // first attempt's sending (a little before it: its lease counts
        // from then, the safe side).
        let started = waiter.started();
        let deadline = started + self.wait;
        let mut first = Some(started);
        // With a wait budget, a busy reply also keeps our place in line.
        let in_line = !self.wait.is_zero();
        let mut retry_delay = FIRST_ATTEMPT_RETRY_DELAY;
        // A lock this client already waits for: join those waiters before
        // the first attempt (their subscription is there, no round trip),
        // so that a release after the attempt is heard and a busy reply
        // needs no second look; the attempt goes as the script, which
        // takes a place in line (the fast pipeline would find it taken).
        if in_line && waiter.others_listen() {
            waiter.listen().await.map_err(|e| e.with_key(&self.key))?;
        }
        loop {
            // Handed the lock by a release: ours without asking, if its
            // lease has not run out meanwhile and the gate admits it (else
            // the next attempt finds it ours, or not, or reports the
            // refusal). Not with a replica sync: `WAIT` counts the writes
            // of this client's connection, and the grant was written by the
            // releaser's; the next attempt's renewal of the lease is one.
            // A lease longer than a place's life was handed over for that
            // life only (a waiter that died costs the line no more): the
            // lease's watchdog extends it to the TTL soon after, unless it
            // is given back first.
            let handed = waiter.take_grant();
            if let Some((fence, granted_at)) = handed.filter(|_| self.replicas == 0) {
                // The handed lease: the TTL, or a place's life if shorter.
                let lease = self.ttl.min(self.client.backend.place_life());
                let drift = self.client.backend.drift(lease).min(lease);
                if granted_at + lease - drift > Instant::now()
                    && waiter.admit_grant(self.ttl).await.is_ok()
                {
                    return Ok((fence, granted_at, lease));
                }
            }
            // Armed before the attempt, so a release between the attempt and
            // the sleep still wakes us.
            let armed = waiter.arm();
            let sent_at = first.take().unwrap_or_else(Instant::now);
            observed.attempt();
            let sleep_for = match waiter.attempt(self.ttl, in_line, sent_at).await {
                Ok(Acquired::Yes { fence }) => return Ok((fence, sent_at, self.ttl)),
                Ok(Acquired::Busy { expires_in }) => {
                    observed.busy(in_line);
                    retry_delay = FIRST_ATTEMPT_RETRY_DELAY;
                    if Instant::now() >= deadline {
                        // Out of line (and any trace gone) before
                        // answering, not in the background: the caller may
                        // exit at once.
                        waiter.leave().await;
                        return Err(LockError::Busy {
                            key: self.key.clone(),
                        });
                    }
                    if !waiter.is_listening() {
                        // First time busy: listen for its release, then look
                        // again at once (it may have been released meanwhile).
                        waiter.listen().await.map_err(|e| e.with_key(&self.key))?;
                        continue;
                    }
                    // `None`: a key without expiry, only a release ends it.
                    expires_in.unwrap_or(self.wait)
                }
                Err(error) if error.retry_after().is_some() => {
                    // Closed for now after a restart or failover: wait for
                    // the reopening if the budget reaches it (a release
                    // seen meanwhile wakes us to look again), else say so.
                    let reopens = Instant::now() + error.retry_after().unwrap_or_default();
                    if reopens > deadline {
                        return Err(error.with_key(&self.key));
                    }
                    if !waiter.is_listening() {
                        waiter.listen().await.map_err(|e| e.with_key(&self.key))?;
                    }
                    reopens.saturating_duration_since(Instant::now())
                }
                Err(error) => {
                    // Only what can clear by itself is tried again (Redis
                    // unreachable, a timeout, no quorum). A setup mistake, a
                    // key of another kind (`WrongType`) or a request the
                    // topology refuses (`InvalidArgument`) stays as it is.
                    if Instant::now() + retry_delay >= deadline || !error.is_transient() {
                        return Err(error.with_key(&self.key));
                    }
                    let delay = retry_delay;
                    retry_delay = (retry_delay * 2).min(MAX_ATTEMPT_RETRY_DELAY);
                    tokio::time::sleep(delay).await;
                    continue;
                }
            };
            waiter
                .sleep(armed, (Instant::now() + sleep_for).min(deadline), in_line)
                .await;
        }
    }

    /// Fail closed unless enough replicas acknowledged the acquisition.
    async fn sync_replicas(&self, keys: &LockKeys, token: &str) -> Result<(), LockError> {
        let backend = &self.client.backend;
        let timeout = self.client.settings.replica_sync.timeout;
        let synced = backend.sync_replicas(keys, self.replicas, timeout).await;
        if matches!(synced, Ok(acked) if acked >= self.replicas) {
            return Ok(());
        }
        // Removed before returning, so that nothing is left locked.
        backend.abandon(keys, token).await;
        Err(match synced {
            Ok(acked) => LockError::ReplicaSync {
                key: keys.key().to_owned(),
                acked,
                needed: self.replicas,
            },
            Err(error) => error.with_key(keys.key()),
        })
    }
}
