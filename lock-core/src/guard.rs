//! [`LockGuard`]: proof of holding a lease, and the handle to keep or release it.

use std::sync::Arc;
use std::time::Duration;

use crate::backend::keys::Kind;
use crate::error::{LockError, LostCause};
use crate::lease::Lease;

/// A held lock. Returned by [`LockRequest::acquire`](crate::LockRequest::acquire).
///
/// A lock on Redis is a *lease*: it expires unless renewed, and a holder can
/// lose it without noticing (a long GC-like pause, a network partition, a
/// restarted server). The guard knows its validity deadline, so
/// [`is_held`](Self::is_held) turns false and [`lost`](Self::lost) resolves
/// as soon as the lease can no longer be trusted.
///
/// Give it back with [`release`](Self::release) to learn whether it was still
/// yours; dropping it releases it in the background (never blocking, never
/// panicking; without a tokio runtime the lease simply expires). A guard can
/// be moved to another task: the lock then belongs to that task, and the
/// acquiring task's next acquisition of the key waits like anyone else's.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), leasehold::LockError> {
/// use std::time::Duration;
/// let client = leasehold::LockClient::in_memory();
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
    lease: Arc<Lease>,
    /// Set by `release`, so that `drop` does not release the lease twice.
    released: bool,
    /// A lock re-entered inside the body of a `lock_all` that holds it:
    /// the key this guard stands for (its key and fencing token).
    within: Option<String>,
}

impl LockGuard {
    /// A guard on `lease`, which already counts it as a holder.
    pub(crate) fn new(lease: Arc<Lease>) -> LockGuard {
        LockGuard {
            lease,
            released: false,
            within: None,
        }
    }

    /// A re-entry of `key`, one of the keys of the `lock_all` lease `lease`.
    pub(crate) fn within(lease: Arc<Lease>, key: String) -> LockGuard {
        LockGuard {
            lease,
            released: false,
            within: Some(key),
        }
    }

    pub(crate) fn lease(&self) -> &Arc<Lease> {
        &self.lease
    }

    /// The key, as given to [`LockClient::lock`](crate::LockClient::lock) (without the prefix).
    pub fn key(&self) -> &str {
        self.within.as_deref().unwrap_or(self.lease.keys.key())
    }

    /// The fencing token: strictly greater than the token of every earlier
    /// holder of this key (on a single Redis or in memory, data loss
    /// included; see the crate docs for Redlock). Pass it to a storage layer
    /// that rejects a write carrying a token lower than one it has already
    /// seen, so that a holder paused past its lease cannot overwrite its
    /// successor's work. Re-entries see the token of the outermost
    /// acquisition.
    pub fn fencing_token(&self) -> u64 {
        match &self.within {
            Some(key) => self.fencing_token_of(key).unwrap_or(self.lease.fence),
            None => self.lease.fence,
        }
    }

    /// The fencing token of `key` in this guard: for a
    /// [`lock_all`](crate::LockClient::lock_all) guard, the token each of
    /// its keys was granted with (its [`fencing_token`](Self::fencing_token)
    /// is the first sorted key's); for any other guard, its token when
    /// `key` is its key. `None` for a key it does not hold.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), leasehold::LockError> {
    /// let client = leasehold::LockClient::in_memory();
    /// let both = client.lock_all(["acct:doc-b", "acct:doc-a"]).acquire().await?;
    /// assert_eq!(both.fencing_token_of("acct:doc-a"), Some(both.fencing_token()));
    /// assert!(both.fencing_token_of("acct:doc-b").is_some());
    /// assert_eq!(both.fencing_token_of("acct:doc-c"), None);
    /// # both.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn fencing_token_of(&self, key: &str) -> Option<u64> {
        match &self.lease.keys.kind {
            Kind::All(all) => all.fence_of(key),
            _ => (self.lease.keys.key() == key).then_some(self.lease.fence),
        }
    }

    /// `true` while the lease is ours: not released, not refused at renewal,
    /// not lost with its server, and not past its validity deadline.
    pub fn is_held(&self) -> bool {
        self.lease.is_held()
    }

    /// The time left until the validity deadline (zero once lost).
    pub fn remaining(&self) -> Duration {
        self.lease.remaining()
    }

    /// Resolves when the lease is lost: a renewal was refused (the key is
    /// gone or someone else's), its server restarted without it, or its
    /// validity passed without renewal. Use it to stop work that must not
    /// outlive the lock:
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), leasehold::LockError> {
    /// # let client = leasehold::LockClient::in_memory();
    /// # async fn do_work() {}
    /// let guard = client.lock("doc:lost").renew(true).acquire().await?;
    /// tokio::select! {
    ///     () = guard.lost() => eprintln!("lease lost, stopping"),
    ///     () = do_work() => guard.release().await?,
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only watches the lease.
    pub async fn lost(&self) {
        self.lease.lost().await;
    }

    /// Why the lease was lost, once it is (`None` while held).
    pub fn lost_cause(&self) -> Option<LostCause> {
        match self.lease.lost_error() {
            _ if self.lease.is_held() => None,
            LockError::Lost { cause, .. } => Some(cause),
            _ => None,
        }
    }

    /// Set the lease to `ttl` from now. `Err(LockError::NotHeld)` if it is no
    /// longer ours (and the guard is lost from then on).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropped before the reply, the lease keeps its old
    /// deadline here (the server may have extended it; it is still ours).
    pub async fn extend(&self, ttl: Duration) -> Result<(), LockError> {
        self.lease.extend(ttl).await
    }

    /// Give the lock back. Only the last guard of a re-entered lock talks to
    /// the backend. `Err(LockError::NotHeld)` if it expired, or someone else
    /// holds it now; with `at_least`, the key is left to expire at
    /// acquisition + `at_least` instead of being deleted.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropped before it completes, the release goes on in the
    /// background (as when the guard is dropped).
    pub async fn release(mut self) -> Result<(), LockError> {
        self.released = true;
        let lease = self.lease.clone();
        if !lease.exit() {
            // An outer holder still has it.
            return if lease.is_held() {
                Ok(())
            } else {
                Err(lease.not_held())
            };
        }
        let releasing = ReleaseInProgress(Some(lease));
        releasing.finish().await
    }
}

/// The last holder's release in progress: finished in the background if
/// its future is dropped.
struct ReleaseInProgress(Option<Arc<Lease>>);

impl ReleaseInProgress {
    async fn finish(mut self) -> Result<(), LockError> {
        let Some(lease) = self.0.clone() else {
            return Ok(());
        };
        let result = lease.release().await;
        self.0 = None;
        result
    }
}

impl Drop for ReleaseInProgress {
    fn drop(&mut self) {
        if let Some(lease) = self.0.take() {
            lease.release_in_background();
        }
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        if self.lease.exit() {
            self.lease.clone().release_in_background();
        }
    }
}

impl std::fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockGuard")
            .field("key", &self.lease.keys.key())
            .field("fencing_token", &self.lease.fence)
            .field("held", &self.lease.is_held())
            .finish()
    }
}
