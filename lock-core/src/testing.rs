//! A fault kit for your tests (feature `testing`): a [`LockClient`] over an
//! in-memory store of its own, with [`FaultControls`] to take a lease away
//! from its holder (stolen, expired), make the backend unavailable or slow,
//! or restart it, so that you can test what your code does when the lock
//! misbehaves, without a Redis server.
//!
//! ```toml
//! [dev-dependencies]
//! leasehold = { version = "0.1", features = ["testing"] }
//! ```
//!
//! - Each [`FaultyClient`] has a store of its own: tests running in
//!   parallel do not see each other's locks (unlike
//!   [`LockClient::in_memory`], which shares one store per process).
//!   [`FaultControls::another_client`] gives a second client ("another
//!   instance of your service") on the same store and faults.
//! - Time is tokio's clock: under `#[tokio::test(start_paused = true)]`
//!   (or `tokio::time::pause()`) leases, renewals and injected delays all
//!   run on the paused clock, so a test of a 30-second lease takes no time.
//! - The semantics are those of the in-memory backend, which are Redis's:
//!   owner tokens, expiry, fencing, waking the next waiter on release.
//!
//! # A job that must stop when its lease is lost
//!
//! ```
//! use std::time::Duration;
//! use leasehold::{LockError, LostCause};
//! use leasehold::testing::FaultyClient;
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() {
//! let kit = FaultyClient::new();
//! let job = kit.client.lock("nightly").ttl(Duration::from_secs(3)).renew(true).run(async {
//!     tokio::time::sleep(Duration::from_secs(3600)).await; // a long job
//! });
//! let steal = async {
//!     tokio::time::sleep(Duration::from_secs(5)).await;
//!     assert!(kit.controls.steal("nightly")); // someone else holds it now
//!     std::future::pending::<()>().await
//! };
//! let outcome = tokio::select! { outcome = job => outcome, () = steal => unreachable!() };
//! // Stopped at the next renewal (every ttl/3), not an hour later.
//! assert!(matches!(outcome, Err(LockError::Lost { cause: LostCause::Refused, .. })));
//! # }
//! ```
//!
//! # A handler when Redis is down, and when the lock is busy
//!
//! ```
//! use leasehold::testing::FaultyClient;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), leasehold::LockError> {
//! let kit = FaultyClient::new();
//!
//! // Another instance holds the order's lock: ours is busy.
//! let other = kit.controls.another_client();
//! let held = other.lock("order:42").acquire().await?;
//! let err = kit.client.lock("order:42").acquire().await.unwrap_err();
//! assert!(err.is_busy());
//! held.release().await?;
//!
//! // Redis goes away: every call fails with `LockError::Backend`.
//! kit.controls.set_unavailable(true);
//! let err = kit.client.lock("order:42").acquire().await.unwrap_err();
//! assert!(err.is_unavailable());
//! kit.controls.heal();
//! assert!(kit.client.lock("order:42").try_acquire().await?.is_some());
//! # Ok(()) }
//! ```

use std::sync::Arc;
use std::time::Duration;

use crate::backend::faulty::FaultyBackend;
use crate::builder::LockClientBuilder;
use crate::client::LockClient;

/// The owner a stolen lock is given to.
const THIEF: &str = "00000000000000000000000000000000:leasehold-testing-thief";

/// A [`LockClient`] over an isolated, fault-injectable in-memory store, and
/// the controls of that store. See the [module docs](self).
///
/// Both fields are public: hand `client` to the code under test (clone it
/// freely) and keep `controls` in the test.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct FaultyClient {
    /// The client to give to the code under test.
    pub client: LockClient,
    /// What the test does to the store behind it.
    pub controls: FaultControls,
}

impl FaultyClient {
    /// A client with default settings over a new store.
    pub fn new() -> FaultyClient {
        FaultyClient::with_builder(LockClient::builder())
    }

    /// A client built with `builder`'s settings (prefix, default TTL,
    /// name, ...) over a new store. An invalid setting falls back to the
    /// defaults with a warning, as in
    /// [`LockClientBuilder::in_memory`].
    ///
    /// ```
    /// use std::time::Duration;
    /// use leasehold::{LockClient, testing::FaultyClient};
    ///
    /// let kit = FaultyClient::with_builder(
    ///     LockClient::builder().name("worker-1").default_ttl(Duration::from_secs(5)),
    /// );
    /// assert_eq!(kit.client.name(), "worker-1");
    /// ```
    pub fn with_builder(builder: LockClientBuilder) -> FaultyClient {
        let backend = Arc::new(FaultyBackend::new());
        let client = builder.clone().over(backend.clone());
        FaultyClient {
            controls: FaultControls {
                backend,
                prefix: client.prefix().to_owned(),
                builder,
            },
            client,
        }
    }
}

impl Default for FaultyClient {
    fn default() -> Self {
        FaultyClient::new()
    }
}

/// The controls of a [`FaultyClient`]'s store. Cheap to clone; every clone
/// acts on the same store. Keys are given as to
/// [`LockClient::lock`] (without the prefix).
#[derive(Clone)]
pub struct FaultControls {
    backend: Arc<FaultyBackend>,
    prefix: String,
    builder: LockClientBuilder,
}

impl FaultControls {
    fn lock_name(&self, key: &str) -> String {
        crate::backend::LockKeys::new(&self.prefix, key)
            .lock()
            .to_owned()
    }

    /// Someone else takes the lock `key` now, keeping its expiry: its
    /// holder's next renewal (within `ttl / 3` with `renew`) or
    /// [`extend`](crate::LockGuard::extend) is refused and the lease is lost
    /// with [`LostCause::Refused`](crate::LostCause::Refused); its
    /// [`release`](crate::LockGuard::release) returns
    /// [`LockError::NotHeld`](crate::LockError::NotHeld). Others find the lock busy until it expires.
    /// Returns whether the lock was held.
    pub fn steal(&self, key: &str) -> bool {
        self.backend.store().steal(&self.lock_name(key), THIEF)
    }

    /// The lock `key` expires now on the store, as if its TTL had run out
    /// (a holder paused for too long): the holder's next renewal is
    /// refused ([`LostCause::Refused`](crate::LostCause::Refused)), and the
    /// lock is free for the next taker at once. Like on Redis, nobody is
    /// told: a waiter notices when it would have. Returns whether the lock
    /// was held.
    pub fn expire(&self, key: &str) -> bool {
        self.backend.store().expire(&self.lock_name(key))
    }

    /// Whether the lock `key` is held (by anyone) now.
    pub fn is_locked(&self, key: &str) -> bool {
        self.backend.store().is_locked(&self.lock_name(key))
    }

    /// Make every call to the store fail with [`LockError::Backend`](crate::LockError::Backend)
    /// ([`LockError::is_unavailable`](crate::LockError::is_unavailable) is true), as when Redis is down, or
    /// end that. Held leases are lost when their validity runs out
    /// without a renewal ([`LostCause::Unreachable`](crate::LostCause::Unreachable)).
    pub fn set_unavailable(&self, on: bool) {
        self.backend.set_unavailable(on);
    }

    /// Delay every call to the store by `per_call` (on tokio's clock), as a
    /// slow or distant Redis; zero ends it. A waiting acquisition's budget,
    /// and a lease's validity, include the delay.
    pub fn set_delay(&self, per_call: Duration) {
        self.backend.set_delay(per_call);
    }

    /// End every injected fault (unavailable, delay).
    pub fn heal(&self) {
        self.set_unavailable(false);
        self.set_delay(Duration::ZERO);
    }

    /// The store restarts without persistence: every lock is forgotten and
    /// every held lease of its clients is reported lost at once with
    /// [`LostCause::Restarted`](crate::LostCause::Restarted).
    pub fn restart(&self) {
        self.backend.restart();
    }

    /// How many calls reached the store (each acquisition attempt, release,
    /// renewal batch...): assert that something made no round trip.
    pub fn calls(&self) -> u64 {
        self.backend.calls()
    }

    /// Another client on the same store and faults, with the same settings:
    /// another instance of your service, with its own watchdog, a different
    /// owner for every lock.
    pub fn another_client(&self) -> LockClient {
        self.builder.clone().over(self.backend.clone())
    }
}

impl std::fmt::Debug for FaultControls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultControls")
            .field("prefix", &self.prefix)
            .field("calls", &self.calls())
            .finish_non_exhaustive()
    }
}
