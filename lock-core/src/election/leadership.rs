//! [`Leadership`]: one term of an election won, held until it is resigned,
//! dropped or lost.

use std::sync::Arc;

use tokio::time::Instant;

use crate::backend::Backend;
use crate::error::{LockError, LostCause};
use crate::guard::LockGuard;
use crate::lease::Lease;

/// One term of leadership, won by [`Election::campaign`](super::Election::campaign): the instance
/// leads until it [resigns](Self::resign), drops this (a resignation in the
/// background), or loses the lease ([`lost`](Self::lost) resolves). The
/// lease is renewed every `ttl / 3` meanwhile. `Send + 'static`: it can be
/// moved into a spawned task.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), leasehold_core::LockError> {
/// # async fn lead_the_scheduler(_term: u64) {}
/// let client = leasehold_core::LockClient::in_memory();
/// let lead = client.election("doc:leadership").campaign().await?;
/// tokio::select! {
///     () = lead.lost() => eprintln!("no longer the leader: stop"),
///     () = lead_the_scheduler(lead.term()) => lead.resign().await?,
/// }
/// # Ok(()) }
/// ```
#[must_use = "leadership is given back as soon as it is dropped"]
pub struct Leadership {
    /// `None` only once resigned.
    guard: Option<LockGuard>,
    term: u64,
    name: Arc<str>,
    backend: Arc<dyn Backend>,
}

impl Leadership {
    /// The leadership that `guard` holds, in the election `name`.
    pub(super) fn new(guard: LockGuard, name: Arc<str>, backend: Arc<dyn Backend>) -> Leadership {
        Leadership {
            term: guard.fencing_token(),
            guard: Some(guard),
            name,
            backend,
        }
    }

    /// The term: the fencing token of this leadership, strictly greater
    /// than every earlier term of the election (see
    /// [`LockGuard::fencing_token`]). Pass it with every write the leader
    /// makes, to a store that refuses a write with a lower term than one
    /// it has seen: a leader paused past its lease then cannot overwrite
    /// its successor's work.
    pub fn term(&self) -> u64 {
        self.term
    }

    /// The election's name.
    pub fn election(&self) -> &str {
        &self.name
    }

    /// `true` while this instance leads: not resigned, not lost, and not
    /// past the lease's validity.
    pub fn is_leader(&self) -> bool {
        self.guard.as_ref().is_some_and(LockGuard::is_held)
    }

    /// Why the leadership was lost, once it is (`None` while leading).
    pub fn lost_cause(&self) -> Option<LostCause> {
        self.guard.as_ref().and_then(LockGuard::lost_cause)
    }

    /// Resolves when the leadership is lost: a renewal was refused (the
    /// lease is gone or someone else's, e.g. after an operator's
    /// `force_release`), its server restarted or failed over without it,
    /// or its validity passed (renewals failed).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only watches the lease.
    pub async fn lost(&self) {
        if let Some(guard) = &self.guard {
            guard.lost().await;
        }
    }

    /// Step down: the lease is given back, and the first candidate in line
    /// is elected at once (handed the leadership by the release itself).
    /// `Err(LockError::NotHeld)` if it was lost already.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropped before it completes, the resignation goes on in
    /// the background.
    pub async fn resign(mut self) -> Result<(), LockError> {
        let Some(guard) = self.guard.take() else {
            return Ok(());
        };
        let keys = guard.lease().keys.clone();
        let result = guard.release().await;
        (self.backend.wakeups()).wake_observers(keys.channel());
        result.map_err(|error| error.renamed(keys.key(), &self.name))
    }

    /// Hold the leadership, renewed, until `from` before acting on it:
    /// `false` if it is lost meanwhile.
    pub(super) async fn take_office(&self, from: Instant) -> bool {
        if from <= Instant::now() {
            return self.is_leader();
        }
        tracing::info!(election = %self.name, term = self.term, "leasehold: elected after the server lost data; taking office once an earlier leader's lease has run out");
        tokio::select! {
            () = self.lost() => false,
            () = tokio::time::sleep_until(from) => self.is_leader(),
        }
    }

    pub(super) fn lease(&self) -> Option<&Arc<Lease>> {
        self.guard.as_ref().map(LockGuard::lease)
    }

    /// Wake this process's watchers of the election: the leadership changed.
    pub(super) fn tell_watchers(&self) {
        if let Some(lease) = self.lease() {
            (self.backend.wakeups()).wake_observers(lease.keys.channel());
        }
    }
}

impl Drop for Leadership {
    fn drop(&mut self) {
        let Some(guard) = self.guard.take() else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            // No runtime: the lease runs out by itself.
            return;
        };
        let (backend, keys) = (self.backend.clone(), guard.lease().keys.clone());
        runtime.spawn(async move {
            if let Err(error) = guard.release().await {
                tracing::debug!(%error, "leasehold: background resignation of a dropped leadership failed");
            }
            backend.wakeups().wake_observers(keys.channel());
        });
    }
}

impl std::fmt::Debug for Leadership {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Leadership")
            .field("election", &self.name)
            .field("term", &self.term)
            .field("leader", &self.is_leader())
            .finish()
    }
}
