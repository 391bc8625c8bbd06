//! [`LockRequest`]: how to take one lock (TTL, renewal, waiting, minimum hold)
//! and the acquisition loop behind `acquire`, `try_acquire` and `run`.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::backend::{Acquired, LockKeys};
use crate::client::ClientInner;
use crate::error::LockError;
use crate::guard::LockGuard;
use crate::lease::Lease;
use crate::reentrancy::{self, Owner};

/// The longest lease accepted: beyond this a "lease" is a permanent lock in
/// disguise, and a crashed holder would block everyone for too long.
pub(crate) const MAX_TTL: Duration = Duration::from_secs(365 * 24 * 3600);

/// The longest wait: longer ones are capped to it (so that deadlines stay
/// representable).
pub const MAX_WAIT: Duration = Duration::from_secs(10 * 365 * 24 * 3600);

/// The longest key accepted, in bytes.
pub(crate) const MAX_KEY_LEN: usize = 4096;

/// The first pause after a failed attempt (Redis unreachable) while the
/// `wait` budget lasts; doubled up to [`MAX_RETRY_DELAY`].
const FIRST_RETRY_DELAY: Duration = Duration::from_millis(20);
const MAX_RETRY_DELAY: Duration = Duration::from_millis(500);

/// A lock to take: built by [`LockClient::lock`](crate::LockClient::lock),
/// configured with the builder methods, consumed by [`acquire`](Self::acquire),
/// [`try_acquire`](Self::try_acquire) or [`run`](Self::run).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), leasehold_core::LockError> {
/// use std::time::Duration;
/// let client = leasehold_core::LockClient::in_memory();
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
    client: Arc<ClientInner>,
    key: String,
    ttl: Duration,
    renew: bool,
    wait: Duration,
    at_least: Option<Duration>,
    max_hold: Option<Duration>,
    replicas: usize,
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
            .finish()
    }
}

pub(crate) fn validate_ttl(ttl: Duration) -> Result<(), LockError> {
    if ttl < Duration::from_millis(1) {
        return Err(LockError::invalid(
            "ttl",
            format!("a lease must last at least 1 ms (got {ttl:?})"),
        ));
    }
    if ttl > MAX_TTL {
        return Err(LockError::invalid(
            "ttl",
            format!("a lease may last at most 365 days (got {ttl:?})"),
        ));
    }
    Ok(())
}

fn validate_key(key: &str) -> Result<(), LockError> {
    if key.is_empty() {
        return Err(LockError::invalid("key", "the lock key is empty"));
    }
    if key.len() > MAX_KEY_LEN {
        return Err(LockError::invalid(
            "key",
            format!(
                "the lock key is {} bytes long, the limit is {MAX_KEY_LEN}",
                key.len()
            ),
        ));
    }
    if key.contains('}') {
        return Err(LockError::invalid(
            "key",
            format!(
                "the lock key `{key}` contains `}}`: braces delimit the Redis Cluster hash tag \
                 that keeps a lock's keys together"
            ),
        ));
    }
    Ok(())
}

impl LockRequest {
    pub(crate) fn new(client: Arc<ClientInner>, key: String) -> LockRequest {
        let ttl = client.default_ttl;
        let replicas = client.replica_sync.replicas;
        LockRequest {
            client,
            key,
            ttl,
            renew: false,
            wait: Duration::ZERO,
            at_least: None,
            max_hold: None,
            replicas,
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
    pub async fn acquire(self) -> Result<LockGuard, LockError> {
        validate_key(&self.key)?;
        validate_ttl(self.ttl)?;
        if self.at_least.is_some_and(|min| min > MAX_TTL) {
            return Err(LockError::invalid(
                "at_least",
                format!(
                    "at most 365 days (got {:?})",
                    self.at_least.unwrap_or_default()
                ),
            ));
        }
        let owner = Owner::current();

        // Re-entry: the same task already holds it through this client.
        if let Some(lease) = reentrancy::find(owner, self.client.id, &self.key) {
            lease
                .holders
                .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
            return Ok(LockGuard::new(lease));
        }

        let token: Arc<str> = crate::token::owner_token()?.into();
        let keys = Arc::new(LockKeys::new(&self.client.prefix, &self.key));
        let (fence, acquired_at) = self.acquire_loop(&keys, &token).await?;
        if self.replicas > 0 {
            self.sync_replicas(&keys, &token).await?;
        }
        let lease = Arc::new(Lease::new(
            self.client.clone(),
            keys,
            token,
            fence,
            owner,
            self.ttl,
            self.renew,
            acquired_at,
            self.at_least,
        ));
        if self.renew {
            self.client.watchdog.track(&self.client, &lease);
        }
        Ok(LockGuard::new(lease))
    }

    /// One attempt (the `wait` setting is ignored): `Ok(None)` when the lock
    /// is busy, an error only when something is wrong.
    pub async fn try_acquire(self) -> Result<Option<LockGuard>, LockError> {
        match self.wait(Duration::ZERO).acquire().await {
            Ok(guard) => Ok(Some(guard)),
            Err(LockError::Busy { .. }) => Ok(None),
            Err(other) => Err(other),
        }
    }

    /// Acquire, run `body` while holding the lock, release.
    ///
    /// If the lease is lost while `body` runs (a renewal refused, or the
    /// validity passed without [`renew`](Self::renew)), `body` is dropped at
    /// its next await point and `Err(LockError::Lost)` is returned. A failure
    /// to release after `body` completed is logged, not returned: the work is
    /// done and the lease expires on its own.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), leasehold_core::LockError> {
    /// let client = leasehold_core::LockClient::in_memory();
    /// let total = client.lock("doc:run").renew(true).run(async { 40 + 2 }).await?;
    /// assert_eq!(total, 42);
    /// # Ok(()) }
    /// ```
    pub async fn run<F: Future>(self, body: F) -> Result<F::Output, LockError> {
        let guard = self.acquire().await?;
        let output = tokio::select! {
            biased;
            () = guard.lost() => None,
            output = body => Some(output),
        };
        match output {
            Some(output) => {
                if let Err(error) = guard.release().await {
                    tracing::warn!(%error, "leasehold: release after the body finished failed");
                }
                Ok(output)
            }
            None => Err(LockError::Lost {
                key: guard.key().to_owned(),
                cause: crate::error::LostCause::Expired,
            }),
        }
    }

    /// Attempt, and while the `wait` budget lasts, sleep until a release or
    /// the holder's expiry, then attempt again. Returns the fence and the
    /// instant the winning attempt was sent.
    async fn acquire_loop(
        &self,
        keys: &LockKeys,
        token: &str,
    ) -> Result<(u64, Instant), LockError> {
        let backend = &*self.client.backend;
        let deadline = Instant::now() + self.wait;
        // With a wait budget, a busy reply also keeps our place in line.
        let in_line = !self.wait.is_zero();
        let mut watching = None::<Watching<'_>>;
        let mut retry_delay = FIRST_RETRY_DELAY;
        loop {
            // Armed before the attempt, so a release between the attempt and
            // the sleep still wakes us.
            let wake = watching.as_ref().map(|w| w.notify.clone());
            let notified = wake.as_ref().map(|n| n.notified());
            let mut notified = std::pin::pin!(notified);
            if let Some(n) = notified.as_mut().as_pin_mut() {
                n.enable();
            }

            let sent_at = Instant::now();
            let sleep_for = match backend.acquire(keys, token, self.ttl, in_line).await {
                Ok(Acquired::Yes { fence }) => {
                    if let Some(w) = watching.as_mut() {
                        w.acquired = true;
                    }
                    return Ok((fence, sent_at));
                }
                Ok(Acquired::Busy { expires_in }) => {
                    retry_delay = FIRST_RETRY_DELAY;
                    if Instant::now() >= deadline {
                        if in_line && watching.is_none() {
                            leave_in_background(&self.client, keys, token);
                        }
                        return Err(LockError::Busy {
                            key: keys.name.clone(),
                        });
                    }
                    if watching.is_none() {
                        // First time busy: listen for its release, then look
                        // again at once (it may have been released meanwhile).
                        watching = Some(Watching::start(&self.client, keys, token).await);
                        continue;
                    }
                    // `None`: a key without expiry, only a release ends it.
                    expires_in.unwrap_or(self.wait)
                }
                Err(error) => {
                    if Instant::now() + retry_delay >= deadline {
                        self.forget_attempt(keys, token);
                        if in_line && watching.is_none() {
                            leave_in_background(&self.client, keys, token);
                        }
                        return Err(error.with_key(&keys.name));
                    }
                    let delay = retry_delay;
                    retry_delay = (retry_delay * 2).min(MAX_RETRY_DELAY);
                    tokio::time::sleep(delay).await;
                    continue;
                }
            };
            let until = (Instant::now() + sleep_for).min(deadline);
            match notified.as_pin_mut() {
                Some(notified) => {
                    tokio::select! {
                        () = notified => {}
                        () = tokio::time::sleep_until(until) => {}
                    }
                }
                None => tokio::time::sleep_until(until).await,
            }
        }
    }

    /// Fail closed unless enough replicas acknowledged the acquisition.
    async fn sync_replicas(&self, keys: &LockKeys, token: &str) -> Result<(), LockError> {
        let backend = &self.client.backend;
        let timeout = self.client.replica_sync.timeout;
        let synced = backend.sync_replicas(keys, self.replicas, timeout).await;
        if matches!(synced, Ok(acked) if acked >= self.replicas) {
            return Ok(());
        }
        if let Err(error) = backend.release(keys, token, Duration::ZERO).await {
            tracing::warn!(%error, key = %keys.name, "leasehold: could not release an unreplicated lock; it expires with its lease");
        }
        Err(match synced {
            Ok(acked) => LockError::ReplicaSync {
                key: keys.name.clone(),
                acked,
                needed: self.replicas,
            },
            Err(error) => error.with_key(&keys.name),
        })
    }

    /// After a failed attempt whose reply may have been lost, make sure no
    /// lock is left under our token (best effort, in the background).
    fn forget_attempt(&self, keys: &LockKeys, token: &str) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let client = self.client.clone();
        let keys = keys.clone();
        let token = token.to_owned();
        runtime.spawn(async move {
            let _ = client.backend.release(&keys, &token, Duration::ZERO).await;
        });
    }
}

/// Give up `token`'s place in the line of `keys` without waiting for it
/// (from `Drop`, and when a wait ends without the lock).
fn leave_in_background(client: &Arc<ClientInner>, keys: &LockKeys, token: &str) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        // No runtime: the place lapses by itself.
        return;
    };
    let (client, keys, token) = (client.clone(), keys.clone(), token.to_owned());
    runtime.spawn(async move { client.backend.leave(&keys, &token).await });
}

/// A waiter registered for release announcements of one lock; on drop it
/// leaves the local list and, without the lock, its place in the line.
struct Watching<'a> {
    client: &'a Arc<ClientInner>,
    keys: &'a LockKeys,
    token: &'a str,
    notify: Arc<tokio::sync::Notify>,
    subscribed: bool,
    acquired: bool,
}

impl<'a> Watching<'a> {
    async fn start(
        client: &'a Arc<ClientInner>,
        keys: &'a LockKeys,
        token: &'a str,
    ) -> Watching<'a> {
        let backend = &client.backend;
        let notify = backend.waiters().join(&keys.channel, token);
        // Without a subscription the waiter still wakes when the holder's
        // lease runs out, and on releases made through this client.
        let subscribed = match backend.watch(keys).await {
            Ok(()) => true,
            Err(error) => {
                tracing::debug!(%error, key = %keys.name, "leasehold: no release notifications, waking at expiry");
                false
            }
        };
        Watching {
            client,
            keys,
            token,
            notify,
            subscribed,
            acquired: false,
        }
    }
}

impl Drop for Watching<'_> {
    fn drop(&mut self) {
        let backend = &self.client.backend;
        backend
            .waiters()
            .leave(&self.keys.channel, self.token, !self.acquired);
        if !self.acquired {
            leave_in_background(self.client, self.keys, self.token);
        }
        if self.subscribed {
            backend.unwatch(self.keys);
        }
    }
}
