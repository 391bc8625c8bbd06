//! [`LockClient`]: the entry point, one per backend, cheap to clone.

use std::sync::Arc;

use crate::backend::{Inspected, LockKeys};
use crate::election::Election;
use crate::error::LockError;
use crate::info::{Holder, LockInfo, LockKind};
use crate::limits::{require_runtime, validate_key};
use crate::request::{LockRequest, Shared};
use crate::rw_lock::RwLock;
use crate::shape::{Shape, sorted_keys};

/// A handle to a lock backend: one Redis server, a Redis Cluster, a set of
/// independent masters (Redlock), or the in-process store.
///
/// Cheap to clone (an `Arc`): clones share connections, the watchdog, and
/// reentrancy (a task re-entering a lock through a clone re-enters).
///
/// **leasehold needs a [tokio](https://docs.rs/tokio) runtime** with time
/// and I/O enabled (`#[tokio::main]`, or `Builder::enable_all()`): connect
/// and use a client from within one. Outside any tokio runtime (a plain
/// thread, `futures::executor::block_on`, another async runtime), the
/// connect methods, [`LockRequest::acquire`] and the operator calls return
/// [`LockError::InvalidArgument`] named `runtime` instead of letting the
/// Redis client panic. A client is tied to the runtime it connected in.
///
/// ```no_run
/// # async fn demo() -> Result<(), leasehold::LockError> {
/// use leasehold::LockClient;
/// use std::time::Duration;
///
/// let client = LockClient::connect("redis://127.0.0.1:6379").await?;
/// let guard = client.lock("order:42").ttl(Duration::from_secs(10)).acquire().await?;
/// // ... work while holding the lock ...
/// guard.release().await?;
///
/// // Or tuned through the builder:
/// let client = LockClient::builder()
///     .prefix("billing:locks:")
///     .default_ttl(Duration::from_secs(10))
///     .connect_timeout(Duration::from_millis(500))
///     .connect("redis://:secret@10.0.0.5:6379/2")
///     .await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct LockClient {
    pub(crate) shared: Arc<Shared>,
}

impl LockClient {
    /// A request for the lock named `key` (without prefix). Configure it,
    /// then `acquire`, `try_acquire` or `run` it.
    pub fn lock(&self, key: impl Into<String>) -> LockRequest {
        LockRequest::new(self.shared.clone(), key.into())
    }

    /// A request for one permit of the counting semaphore `key`: at most
    /// `permits` holders at once, across every client and instance.
    /// `permits` must be at least 1 (else the acquisition fails with
    /// [`LockError::InvalidArgument`]); every user of one semaphore should
    /// name the same count.
    ///
    /// The guard is the usual [`LockGuard`](crate::LockGuard): a permit is a
    /// lease (a crashed holder's permit returns at its TTL), renewed by the
    /// watchdog with `renew(true)`, with a fencing token that increases per
    /// grant. Waiters are served first come, first served: a newcomer never
    /// takes a permit before a waiter. The same key used as a plain lock or
    /// a rw lock is [`LockError::WrongType`]. Not available on Redlock
    /// ([`LockError::InvalidArgument`]).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), leasehold::LockError> {
    /// use std::time::Duration;
    /// let client = leasehold::LockClient::in_memory();
    /// let one = client.semaphore("partner-api:doc", 2).acquire().await?;
    /// let two = client.semaphore("partner-api:doc", 2).acquire().await?;
    /// assert!(client.semaphore("partner-api:doc", 2).try_acquire().await?.is_none());
    /// one.release().await?;
    /// let three = client
    ///     .semaphore("partner-api:doc", 2)
    ///     .wait(Duration::from_secs(1))
    ///     .acquire()
    ///     .await?;
    /// # two.release().await?; three.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn semaphore(&self, key: impl Into<String>, permits: u32) -> LockRequest {
        LockRequest::shaped(self.shared.clone(), key.into(), Shape::Semaphore(permits))
    }

    /// The read-write lock `key`: a cheap handle whose
    /// [`read`](RwLock::read) and [`write`](RwLock::write) give the usual
    /// [`LockRequest`]. Many readers at once, or one writer; a waiting
    /// writer is not overtaken by readers that come after it. The same key
    /// used as a plain lock or a semaphore is [`LockError::WrongType`]. Not
    /// available on Redlock ([`LockError::InvalidArgument`]).
    pub fn rw_lock(&self, key: impl Into<String>) -> RwLock {
        RwLock::new(self.shared.clone(), key.into())
    }

    /// A request for every one of the lock keys `keys` at once, or none:
    /// sorted and deduplicated, so two callers that name the same keys in
    /// opposite orders never deadlock. These are ordinary lock keys:
    /// [`lock`](Self::lock) of one of them waits while a `lock_all` holds
    /// it, and the other way round.
    ///
    /// The guard's [`key`](crate::LockGuard::key) and
    /// [`fencing_token`](crate::LockGuard::fencing_token) are those of the
    /// first key in sorted order;
    /// [`fencing_token_of`](crate::LockGuard::fencing_token_of) gives each
    /// key's. Inside the body of its [`run`](LockRequest::run) (or of a
    /// `#[distributed_lock(keys = [...])]` function), [`lock`](Self::lock)
    /// of one of its keys re-enters at once, with that key's token. An
    /// empty list is [`LockError::InvalidArgument`]. Not available on
    /// Redlock.
    ///
    /// On one server (and Sentinel, and in memory) one script takes them
    /// all at once, and a waiter keeps a place in the line of every key:
    /// first come, first served across its keys (a later
    /// [`lock`](Self::lock) or `lock_all` of one of them, even of a free
    /// one, waits behind it). On Redis Cluster each key is its own hash
    /// tag, so keys usually live in different slots and no script can span
    /// them: they are then taken one by one in sorted order, every one
    /// taken is given back as soon as one is busy (nothing is held while
    /// waiting, so no deadlock; a plain lock of one key may find it taken
    /// for that moment), and the waiter keeps a place in that busy key's
    /// line only (first come, first served per key).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), leasehold::LockError> {
    /// let client = leasehold::LockClient::in_memory();
    /// let both = client.lock_all(["acct:2", "acct:1"]).acquire().await?;
    /// assert_eq!(both.key(), "acct:1");
    /// assert!(client.lock("acct:2").try_acquire().await?.is_none());
    /// # both.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn lock_all<I, S>(&self, keys: I) -> LockRequest
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let keys = sorted_keys(keys);
        let first = keys.first().cloned().unwrap_or_default();
        LockRequest::shaped(self.shared.clone(), first, Shape::All(keys))
    }

    /// The election named `name` (see [`Election`]): campaign for it, see
    /// who leads, run work while leading. Cheap: nothing is sent until
    /// used. The name is its own namespace, apart from lock keys:
    /// `lock("scheduler")` and `election("scheduler")` never collide. It
    /// follows the rules of a lock key (not empty, at most
    /// [`MAX_KEY_LEN`](crate::MAX_KEY_LEN) bytes, no `}`).
    pub fn election(&self, name: impl Into<String>) -> Election {
        Election::new(self.shared.clone(), name.into())
    }

    /// The key prefix of this client.
    pub fn prefix(&self) -> &str {
        &self.shared.settings.prefix
    }

    /// The name operators see as the holder of this client's locks.
    pub fn name(&self) -> &str {
        &self.shared.settings.name
    }

    /// Who holds the lock `key` now, for how much longer, with which fencing
    /// token, and how many wait for it; `None` when it is free.
    ///
    /// Read in one atomic step (one script on Redis), so the fields agree
    /// with each other. On Redlock, what a majority of masters says: the
    /// lock is held when a majority have the same holder.
    ///
    /// A key that holds something leasehold did not write (a value of
    /// another type, or a string that is not an owner token) is
    /// [`LockError::WrongType`], naming the Redis key: it is not shown as
    /// a holder.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), leasehold::LockError> {
    /// use leasehold::LockClient;
    ///
    /// let client = LockClient::builder()
    ///     .prefix("doc-inspect:")
    ///     .name("billing-worker-3")
    ///     .in_memory();
    /// assert!(client.inspect("order:42").await?.is_none());
    ///
    /// let _guard = client.lock("order:42").acquire().await?;
    /// let info = client.inspect("order:42").await?;
    /// assert_eq!(info.map(|i| i.holder).as_deref(), Some("billing-worker-3"));
    /// # Ok(()) }
    /// ```
    pub async fn inspect(&self, key: &str) -> Result<Option<LockInfo>, LockError> {
        require_runtime("inspect")?;
        let keys = self.operator_keys(key)?;
        let found = self
            .shared
            .backend
            .inspect(&keys)
            .await
            .map_err(|e| e.with_key(key))?;
        Ok(found.map(into_info))
    }

    /// Every held lock whose key (as given to `lock`, without the prefix)
    /// matches the glob `pattern` (Redis glob syntax: `*`, `?`, `[abc]`,
    /// `\` escapes), in order of key.
    ///
    /// On Redis it walks the keyspace with `SCAN` and a cursor (never
    /// `KEYS`, which would block the server), on every primary of a cluster
    /// and every master of a Redlock client (where a lock counts when a
    /// majority say so). A lock taken or released during the walk may or
    /// may not be listed.
    ///
    /// Elections whose names match are listed too, with
    /// [`LockKind::Election`] as `kind` and the election's name as `key`
    /// (the holder is the leader, the fencing token its term).
    ///
    /// Only leasehold's locks are listed. A matching key that is not one is
    /// left out and logged (WARN, naming the Redis key), so that it cannot
    /// hide the others: a value of another type at a lock's names (a hash
    /// at `leasehold:{x}:lock`, a non-number in its fence key), or a string
    /// that is not an owner token (`<32 hex digits>:<client name>`), such
    /// as one written by another program without expiry. Such a key still
    /// blocks that lock; [`inspect`](Self::inspect) of it is
    /// [`LockError::WrongType`] naming the Redis key, and
    /// [`force_release`](Self::force_release) removes a foreign string.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), leasehold::LockError> {
    /// use leasehold::LockClient;
    ///
    /// let client = LockClient::builder().prefix("doc-list:").in_memory();
    /// let _a = client.lock("order:1").acquire().await?;
    /// let _b = client.lock("order:2").acquire().await?;
    /// let _c = client.lock("invoice:1").acquire().await?;
    ///
    /// let orders = client.list("order:*").await?;
    /// let keys: Vec<&str> = orders.iter().map(|info| info.key.as_str()).collect();
    /// assert_eq!(keys, ["order:1", "order:2"]);
    /// # Ok(()) }
    /// ```
    pub async fn list(&self, pattern: &str) -> Result<Vec<LockInfo>, LockError> {
        require_runtime("list")?;
        if pattern.contains('}') {
            return Err(LockError::invalid(
                "pattern",
                format!("the pattern `{pattern}` contains `}}`, which no lock key does"),
            ));
        }
        let found = self
            .shared
            .backend
            .list(&self.shared.settings.prefix, pattern)
            .await?;
        let mut infos: Vec<LockInfo> = found.into_iter().map(into_info).collect();
        infos.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(infos)
    }

    /// An operator's release: delete the lock `key` whoever holds it, and
    /// wake the next waiter in line. Returns whether it was held.
    ///
    /// The old holder is not asked: its guard is reported lost with
    /// [`LostCause::ForceReleased`](crate::LostCause::ForceReleased) at its
    /// next renewal (or extension), and its `release` then fails with
    /// [`LockError::NotHeld`]. Until then it may still believe it holds the
    /// lock: use fencing tokens where that matters.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), leasehold::LockError> {
    /// use leasehold::LockClient;
    ///
    /// let client = LockClient::builder().prefix("doc-force:").in_memory();
    /// let guard = client.lock("order:42").acquire().await?;
    ///
    /// assert!(client.force_release("order:42").await?);
    /// assert!(!client.force_release("order:42").await?); // already free
    /// assert!(client.inspect("order:42").await?.is_none());
    /// assert!(guard.release().await.is_err()); // no longer the holder's
    /// # Ok(()) }
    /// ```
    pub async fn force_release(&self, key: &str) -> Result<bool, LockError> {
        require_runtime("force_release")?;
        let keys = self.operator_keys(key)?;
        let held = self
            .shared
            .backend
            .force_release(&keys)
            .await
            .map_err(|e| e.with_key(key))?;
        if held {
            tracing::warn!(key, "leasehold: lock force-released by an operator");
        }
        Ok(held)
    }

    /// The Redis keys of lock `key`, for the operator calls (`inspect`,
    /// `force_release`): the key is checked as `lock` checks it.
    fn operator_keys(&self, key: &str) -> Result<LockKeys, LockError> {
        validate_key(key)?;
        Ok(LockKeys::new(&self.shared.settings.prefix, key))
    }
}

fn into_info(found: Inspected) -> LockInfo {
    let shown = crate::backend::shown_key(&found.key);
    if shown != found.key {
        // An election's: shown by its name.
        let name = shown.to_owned();
        return crate::election::info_of(&name, found);
    }
    let info = LockInfo::new(
        found.key,
        &found.token,
        found.ttl,
        found.fence,
        found.waiters,
    );
    let Some(first) = found.shared.first() else {
        return info;
    };
    let kind = match first.letter {
        's' => LockKind::Semaphore,
        _ if found.shared.iter().any(|h| h.letter == 'w') => LockKind::Write,
        _ => LockKind::Read,
    };
    let holders = found
        .shared
        .iter()
        .map(|h| Holder::new(&h.token, h.ttl, h.fence))
        .collect();
    info.with_holders(kind, holders)
}

impl std::fmt::Debug for LockClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockClient")
            .field("backend", &self.shared.backend.describe())
            .field("name", &self.shared.settings.name)
            .field("prefix", &self.shared.settings.prefix)
            .field("default_ttl", &self.shared.settings.default_ttl)
            .finish()
    }
}
