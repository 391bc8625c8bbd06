//! [`LockGuard`]: proof of holding a lease, and the handle to keep or give it back.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::error::LockError;
use crate::lease::Lease;
use crate::reentrancy;

static NEXT_GUARD: AtomicU64 = AtomicU64::new(1);

/// A held lock. Returned by [`LockRequest::acquire`](crate::LockRequest::acquire).
///
/// A lock on Redis is a *lease*: it expires unless renewed, and a holder can
/// lose it without noticing (a long GC-like pause, a network partition, a
/// `FLUSHALL`). The guard knows its validity deadline, so [`is_held`](Self::is_held)
/// turns false and [`lost`](Self::lost) resolves as soon as the lease can no
/// longer be trusted.
///
/// Give it back with [`release`](Self::release) to learn whether it was still
/// yours; dropping it releases it in the background (never blocking, never
/// panicking; without a tokio runtime the lease simply expires).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), leasehold_core::LockError> {
/// use std::time::Duration;
/// let client = leasehold_core::LockClient::in_memory();
///
/// let guard = client.lock("doc:guard").ttl(Duration::from_secs(10)).acquire().await?;
/// assert_eq!(guard.key(), "doc:guard");
/// assert!(guard.is_held());
/// guard.extend(Duration::from_secs(20)).await?;
/// guard.release().await?;
/// # Ok(()) }
/// ```
#[must_use = "the lock is released as soon as the guard is dropped"]
pub struct LockGuard {
    id: u64,
    lease: Arc<Lease>,
    /// Set by `release`, so that `drop` does not give the lease back twice.
    released: bool,
}

impl LockGuard {
    /// A new guard on `lease` (its first holder, or a re-entry), recorded
    /// for the owner's reentrancy.
    pub(crate) fn new(lease: Arc<Lease>) -> LockGuard {
        let id = NEXT_GUARD.fetch_add(1, Ordering::Relaxed);
        reentrancy::push(id, &lease);
        LockGuard {
            id,
            lease,
            released: false,
        }
    }

    fn lease(&self) -> &Lease {
        &self.lease
    }

    /// The key, as given to [`LockClient::lock`](crate::LockClient::lock) (without the prefix).
    pub fn key(&self) -> &str {
        &self.lease().keys.name
    }

    /// The fencing token: strictly greater than the token of every earlier
    /// holder of this key (on a single Redis or in memory; see the crate docs
    /// for Redlock and failover). Pass it to a storage layer that rejects a
    /// write carrying a token lower than one it has already seen, so that a
    /// holder paused past its lease cannot overwrite its successor's work.
    /// Re-entries see the token of the outermost acquisition.
    pub fn fencing_token(&self) -> u64 {
        self.lease().fence
    }

    /// `true` while the lease is ours: not released, not refused at renewal,
    /// and not past its validity deadline.
    pub fn is_held(&self) -> bool {
        self.lease().is_held()
    }

    /// The time left until the validity deadline (zero once lost).
    pub fn remaining(&self) -> Duration {
        let lease = self.lease();
        if !lease.is_held() {
            return Duration::ZERO;
        }
        lease
            .status()
            .valid_until
            .saturating_duration_since(tokio::time::Instant::now())
    }

    /// Resolves when the lease is lost: a renewal was refused (the key is
    /// gone or someone else's), or its validity passed without renewal.
    /// Use it to stop work that must not outlive the lock:
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), leasehold_core::LockError> {
    /// # let client = leasehold_core::LockClient::in_memory();
    /// # async fn do_work() {}
    /// let guard = client.lock("doc:lost").renew(true).acquire().await?;
    /// tokio::select! {
    ///     () = guard.lost() => eprintln!("lease lost, stopping"),
    ///     () = do_work() => guard.release().await?,
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn lost(&self) {
        self.lease().lost().await;
    }

    /// Set the lease to `ttl` from now. `Err(LockError::NotHeld)` if it is no
    /// longer ours (and the guard is lost from then on).
    pub async fn extend(&self, ttl: Duration) -> Result<(), LockError> {
        self.lease().extend(ttl).await
    }

    /// Give the lock back. Only the last guard of a re-entered lock talks to
    /// the backend. `Err(LockError::NotHeld)` if it expired, or someone else
    /// holds it now; with `at_least`, the key is left to expire at
    /// acquisition + `at_least` instead of being deleted.
    pub async fn release(mut self) -> Result<(), LockError> {
        self.released = true;
        let lease = self.lease.clone();
        reentrancy::remove(lease.owner, self.id);
        if !lease.drop_holder() {
            // An outer guard of this task still holds it.
            return if lease.is_held() {
                Ok(())
            } else {
                Err(lease.not_held())
            };
        }
        if lease.renew {
            lease.client.watchdog.untrack(lease.id);
        }
        lease.release().await
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        let lease = self.lease.clone();
        reentrancy::remove(lease.owner, self.id);
        if !lease.drop_holder() {
            return;
        }
        if lease.renew {
            lease.client.watchdog.untrack(lease.id);
        }
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            // On a runtime that is shutting down the task is dropped unrun:
            // the lease then expires on its own.
            runtime.spawn(async move {
                if let Err(error) = lease.release().await {
                    tracing::debug!(%error, "leasehold: background release of a dropped guard failed");
                }
            });
        }
    }
}

impl std::fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockGuard")
            .field("key", &self.lease.keys.name)
            .field("fencing_token", &self.lease.fence)
            .field("held", &self.lease.is_held())
            .finish()
    }
}
