//! [`LockClient`]: the entry point, one per backend, cheap to clone.

use std::sync::Arc;
use std::time::Duration;

use crate::backend::connect::Address;
use crate::backend::target::Target;
use crate::backend::{Backend, Inspected, LockKeys};
use crate::config::{ReplicaSync, Settings};
use crate::election::Election;
use crate::error::LockError;
use crate::info::{Holder, LockInfo, LockKind};
use crate::limits::{require_runtime, validate_key, validate_prefix, validate_ttl};
use crate::request::{LockRequest, Shared};
use crate::rw_lock::RwLock;
use crate::shape::{Shape, sorted_keys};
use crate::watchdog::Watchdog;

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
    shared: Arc<Shared>,
}

impl LockClient {
    /// Connect to one Redis server: `redis://[user:password@]host[:port][/db]`,
    /// `rediss://...` (with the `tls` feature), or `unix:///path/to/redis.sock`.
    ///
    /// Fails promptly with [`LockError::Backend`] if the server does not answer
    /// (after the connect timeout, 2 s by default). Once connected, the client
    /// reconnects by itself after a restart.
    pub async fn connect(url: &str) -> Result<LockClient, LockError> {
        LockClient::builder().connect(url).await
    }

    /// Connect to N independent Redis masters and lock by majority (Redlock):
    /// a lock is held when N/2 + 1 masters granted it, contacted in parallel,
    /// with validity left (ttl − elapsed − drift, drift = ttl/100 + 2 ms).
    /// Survives the loss of a minority of masters; a failed attempt is undone
    /// on every node. Release, extend and renewal need a majority too.
    ///
    /// **Fencing tokens on Redlock.** Each master keeps its own counter; the
    /// token is the highest among the granting masters, and the others are
    /// raised to it before `acquire` returns (or the acquisition fails). Since
    /// any two majorities share a master, successive holders get strictly
    /// increasing tokens **as long as no master loses its data** (a master
    /// restarted without persistence forgets its counter, as it forgets its
    /// locks). This is the stated assumption under which Redlock is safe at
    /// all; if you cannot make it, do not rely on Redlock for exclusion either.
    ///
    /// Fails with [`LockError::Quorum`] if fewer than a majority answer.
    pub async fn connect_redlock<I, S>(urls: I) -> Result<LockClient, LockError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        LockClient::builder().connect_redlock(urls).await
    }

    /// Connect to a Redis Cluster through any of its nodes (the others are
    /// discovered). Every Redis name of one lock shares a hash tag, so each
    /// operation runs on one slot; release notifications use sharded pub/sub.
    #[cfg(feature = "cluster")]
    pub async fn connect_cluster<I, S>(urls: I) -> Result<LockClient, LockError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        LockClient::builder().connect_cluster(urls).await
    }

    /// Connect to the primary of the Redis set `master_name`, discovered
    /// through its Sentinels and followed across failovers.
    ///
    /// Each sentinel URL is `redis://[user:password@]host:port` (the
    /// sentinel's own credentials). The primary is reached with the same
    /// credentials unless the query gives its own:
    /// `redis://:sentinel-pw@s1:26379?primary_password=pw` (with
    /// `primary_username=` for an ACL user; an empty `primary_password=`
    /// means none). A path (`/2`) selects the primary's database. These are
    /// read from the first URL. No password appears in errors or `Debug`.
    ///
    /// The primary is looked up again when its connection breaks, when it
    /// answers `READONLY`, and when a sentinel announces `+switch-master`.
    /// After a failover, held leases are checked on the new primary at once:
    /// those whose key is not there are lost with
    /// [`LostCause::FailedOver`](crate::LostCause::FailedOver); this client
    /// grants no lock there until the longest lease it issued (and
    /// `restart_grace`) could have run out; waiters are woken to try again.
    /// With [`replica_sync`](LockClientBuilder::replica_sync) an acquisition
    /// reached a replica before it returned, so it survives the promotion of
    /// that replica.
    ///
    /// Fails with [`LockError::Backend`] if no sentinel names a reachable
    /// primary.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), leasehold::LockError> {
    /// use leasehold::LockClient;
    /// use std::time::Duration;
    ///
    /// let client = LockClient::connect_sentinel(
    ///     "mymaster",
    ///     ["redis://10.0.0.1:26379", "redis://10.0.0.2:26379", "redis://10.0.0.3:26379"],
    /// )
    /// .await?;
    /// let guard = client.lock("order:42").ttl(Duration::from_secs(10)).renew(true).acquire().await?;
    /// guard.release().await?;
    ///
    /// // Password-protected sentinels, a primary with its own password,
    /// // acquisitions acknowledged by a replica before they return:
    /// let client = LockClient::builder()
    ///     .replica_sync(1, Duration::from_millis(100))
    ///     .connect_sentinel(
    ///         "mymaster",
    ///         ["redis://:sentinel-pw@10.0.0.1:26379?primary_password=redis-pw"],
    ///     )
    ///     .await?;
    /// # Ok(()) }
    /// ```
    #[cfg(feature = "sentinel")]
    #[cfg_attr(docsrs, doc(cfg(feature = "sentinel")))]
    pub async fn connect_sentinel<I, S>(
        master_name: &str,
        sentinels: I,
    ) -> Result<LockClient, LockError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        LockClient::builder()
            .connect_sentinel(master_name, sentinels)
            .await
    }

    /// The embedded backend: leases live in this process, shared by every
    /// `in_memory()` client of the process (like clients of one Redis server),
    /// with the same semantics: TTL, owner tokens, fencing, wake on release.
    /// For tests and single-process apps.
    pub fn in_memory() -> LockClient {
        LockClient::builder().in_memory()
    }

    /// A builder for the prefix, default TTL and timeouts.
    pub fn builder() -> LockClientBuilder {
        LockClientBuilder::default()
    }

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

    fn from_backend(backend: Arc<dyn Backend>, builder: &LockClientBuilder) -> LockClient {
        LockClient {
            shared: Arc::new(Shared {
                settings: builder.settings.client.for_new_client(),
                watchdog: Arc::new(Watchdog::new(backend.clone())),
                backend,
                candidacies: Default::default(),
            }),
        }
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

/// Builds a [`LockClient`] with a custom prefix, default TTL or timeouts.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), leasehold::LockError> {
/// use std::time::Duration;
/// let client = leasehold::LockClient::builder()
///     .prefix("tests:")
///     .default_ttl(Duration::from_secs(5))
///     .in_memory();
/// assert_eq!(client.prefix(), "tests:");
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Default)]
pub struct LockClientBuilder {
    settings: Settings,
    lazy: bool,
    invalid: Option<LockError>,
}

impl LockClientBuilder {
    /// The prefix of every Redis name (default `leasehold:`). Must not contain
    /// `{` or `}` (they delimit the hash tag).
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        let prefix = prefix.into();
        if let Err(e) = validate_prefix(&prefix) {
            self.invalid = Some(e);
        }
        self.settings.client.prefix = prefix;
        self
    }

    /// The lease length of requests that do not set one (default 30 s).
    pub fn default_ttl(mut self, ttl: Duration) -> Self {
        if let Err(e) = validate_ttl(ttl) {
            self.invalid = Some(e);
        }
        self.settings.client.default_ttl = ttl;
        self
    }

    /// How long to wait for a connection to be established (default 2 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.settings.connect.connect_timeout = timeout;
        self
    }

    /// How long to wait for any one reply (default 2 s). A server that does
    /// not answer in time gives [`LockError::Backend`].
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.settings.connect.response_timeout = timeout;
        self
    }

    /// Require every acquisition to reach `replicas` replicas within
    /// `timeout` (Redis `WAIT` right after the acquire script), failing
    /// closed: with fewer acknowledgements the lock is released again and
    /// [`LockError::ReplicaSync`] returned. This narrows the window in which a
    /// primary that dies before replicating lets a promoted replica grant the
    /// same lock twice. Requests can override the count with
    /// [`LockRequest::replica_sync`]. The response timeout is raised above
    /// `timeout` if needed, since `WAIT` blocks for up to that long.
    ///
    /// `WAIT` blocks the client's command connection while it waits, so other
    /// operations of this client queue behind it: keep `timeout` short.
    ///
    /// For single-server and Sentinel clients ([`connect`](Self::connect),
    /// [`connect_sentinel`](Self::connect_sentinel)); the in-memory
    /// backend has nothing to replicate and accepts it; Redlock and Cluster
    /// clients refuse a synced acquisition with [`LockError::InvalidArgument`].
    pub fn replica_sync(mut self, replicas: usize, timeout: Duration) -> Self {
        self.settings.client.replica_sync = ReplicaSync { replicas, timeout };
        let needed = timeout + Duration::from_secs(1);
        if replicas > 0 && self.settings.connect.response_timeout < needed {
            self.settings.connect.response_timeout = needed;
        }
        self
    }

    /// Who holds a lock, as operators see it (`LockInfo::holder`, the CLI).
    /// Default: `hostname:pid`.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.settings.client.name = name.into();
        self
    }

    /// Grant no lock on a server whose uptime is below `grace` (default
    /// zero). A server that restarted without persistence forgot every lock;
    /// with `grace` at least the longest lease, no client (not even one that
    /// did not see the restart) hands out a lock that an old holder may
    /// still believe it has.
    pub fn restart_grace(mut self, grace: Duration) -> Self {
        self.settings.gate.restart_grace = grace;
        self
    }

    /// Accept a server whose `maxmemory-policy` can evict lock keys
    /// (`allkeys-*`, `volatile-*`). Default `false`: such a server is refused
    /// at connect with an error naming the policy, since an evicted lock key
    /// lets a second holder in.
    pub fn allow_eviction(mut self, allow: bool) -> Self {
        self.settings.gate.allow_eviction = allow;
        self
    }

    /// Whether to use the server's native conditional commands where it
    /// offers them. Default `true`.
    ///
    /// What a server offers is read from its `INFO` at connect and after
    /// every reconnection or failover (Cluster: only what every node
    /// offers): Valkey ≥ 9.0's `DELIFEQ` for a release, Valkey ≥ 8.1's and
    /// Redis ≥ 8.4's `SET … IFEQ` to extend or renew one lease, Redis ≥
    /// 8.4's `DELEX … IFEQ` for a release. Each is one atomic command and
    /// costs the server less than the Lua script it stands in for; it only
    /// serves the plain case (the key holds exactly this holder's token),
    /// and a command the server refuses (an ACL rule, a rename) is dropped
    /// for the rest of the client's life.
    ///
    /// The Lua path is always kept, whatever this says: every script is
    /// loaded with `SCRIPT LOAD` at connect (a server that cannot run Lua
    /// is refused there), and serves every other case (a waiting line, a
    /// key that is not this holder's, a forced release, a value of another
    /// type) and every operation that has no native twin. The results are
    /// the same either way (SPEC semantic 2). `false`: every operation is a
    /// Lua script, e.g. to compare the two or to keep one code path on a
    /// mixed fleet.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), leasehold::LockError> {
    /// use leasehold::LockClient;
    ///
    /// // Scripts only, even on a Valkey 9 that has DELIFEQ and SET IFEQ.
    /// let client = LockClient::builder()
    ///     .native_commands(false)
    ///     .connect("redis://127.0.0.1:6379")
    ///     .await?;
    /// let guard = client.lock("order:42").acquire().await?;
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn native_commands(mut self, on: bool) -> Self {
        self.settings.gate.lua_only = !on;
        self
    }

    /// Trust the CA certificate(s) in `pem` (PEM text, one or more
    /// `-----BEGIN CERTIFICATE-----` blocks) for `rediss://` servers,
    /// instead of the bundled web PKI roots: for a server whose certificate
    /// a private CA signed. Certificates are always verified, host name
    /// included. A `pem` with no certificate makes `connect` fail with
    /// [`LockError::InvalidArgument`], and so does a URL that is not
    /// `rediss://` (it would connect unencrypted).
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), leasehold::LockError> {
    /// let ca = std::fs::read("/etc/redis/tls/ca.crt").unwrap_or_default();
    /// let client = leasehold::LockClient::builder()
    ///     .tls_ca(ca)
    ///     .connect("rediss://locker:secret@redis.internal:6380")
    ///     .await?;
    /// # Ok(()) }
    /// ```
    #[cfg(feature = "tls")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tls")))]
    pub fn tls_ca(mut self, pem: impl Into<Vec<u8>>) -> Self {
        let pem = pem.into();
        if let Err(e) = validate_pem_certs("tls_ca", &pem) {
            self.invalid = Some(e);
        }
        self.settings.connect.tls_certificates().root_cert = Some(pem);
        self
    }

    /// Present this client certificate (PEM chain) and private key (PEM)
    /// to `rediss://` servers that require one (`tls-auth-clients yes`).
    /// With a URL that is not `rediss://`, `connect` fails with
    /// [`LockError::InvalidArgument`] (it would connect unencrypted).
    #[cfg(feature = "tls")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tls")))]
    pub fn tls_client_cert(
        mut self,
        cert_pem: impl Into<Vec<u8>>,
        key_pem: impl Into<Vec<u8>>,
    ) -> Self {
        let client_cert = cert_pem.into();
        if let Err(e) = validate_pem_certs("tls_client_cert", &client_cert) {
            self.invalid = Some(e);
        }
        self.settings.connect.tls_certificates().client_tls = Some(redis::ClientTlsConfig {
            client_cert,
            client_key: key_pem.into(),
        });
        self
    }

    /// Give every metric of this client a `key` label with the lock's key
    /// (feature `metrics`; default `false`).
    ///
    /// **Cardinality warning:** each distinct key becomes its own time
    /// series in every metric, and series are never forgotten by most
    /// recorders. Turn it on only when the set of keys is small and fixed
    /// (a handful of job names), never for keys built from ids
    /// (`order:<id>`, `user:<id>`). See [`crate::observability`].
    #[cfg(feature = "metrics")]
    #[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
    pub fn metrics_key_label(mut self, on: bool) -> Self {
        self.settings.client.metrics_key_label = on;
        self
    }

    fn check(&self) -> Result<(), LockError> {
        match &self.invalid {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        }
    }

    /// Start without waiting for the server: `connect` (and every other
    /// `connect_*`) checks the URLs only and returns at once, and connects
    /// in the background, retrying until the server answers. Until then,
    /// every call fails at once with an unavailable-class error
    /// ([`LockError::is_unavailable`]), or, once the server answered with a
    /// setup mistake (a wrong password, an evicting server), with that
    /// error. The checks `connect` makes (credentials, eviction policy,
    /// restart grace) run when the server first answers.
    ///
    /// For services that must start (and answer 503) while Redis is down,
    /// instead of crash-looping. Default: off (`connect` waits for the
    /// server and fails if it does not answer in time).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), leasehold::LockError> {
    /// // Nothing listens on port 1: the client exists all the same.
    /// let client = leasehold::LockClient::builder()
    ///     .lazy(true)
    ///     .connect("redis://127.0.0.1:1")
    ///     .await?;
    /// let err = client.lock("job").try_acquire().await.unwrap_err();
    /// assert!(err.is_unavailable());
    /// # Ok(()) }
    /// ```
    pub fn lazy(mut self, lazy: bool) -> Self {
        self.lazy = lazy;
        self
    }

    /// Connect to `target` (or, lazily, start connecting) and make the client.
    async fn open(self, target: Target, operation: &'static str) -> Result<LockClient, LockError> {
        self.check()?;
        target.check()?;
        self.check_tls_urls(target.urls())?;
        require_runtime(operation)?;
        let backend = crate::backend::lazy::start(
            target,
            &self.settings.connect,
            self.settings.gate,
            self.lazy,
        )
        .await?;
        Ok(LockClient::from_backend(backend, &self))
    }

    /// TLS certificates (`tls_ca`, `tls_client_cert`) with a URL that does
    /// not ask for TLS would go unused, and the connection would run
    /// unencrypted without a word: refused.
    fn check_tls_urls<S: AsRef<str>>(&self, urls: &[S]) -> Result<(), LockError> {
        #[cfg(feature = "tls")]
        if let Some(certs) = &self.settings.connect.tls {
            let name = if certs.root_cert.is_some() {
                "tls_ca"
            } else {
                "tls_client_cert"
            };
            for url in urls.iter().map(AsRef::as_ref) {
                let scheme = url.trim_start().to_ascii_lowercase();
                if !(scheme.starts_with("rediss://") || scheme.starts_with("valkeys://")) {
                    return Err(LockError::invalid(
                        name,
                        format!(
                            "`{}` is not a rediss:// URL: the connection would not be encrypted \
                             and the certificates given with {name} would go unused; use rediss://",
                            crate::error::redact_url(url)
                        ),
                    ));
                }
            }
        }
        #[cfg(not(feature = "tls"))]
        let _ = urls;
        Ok(())
    }

    /// Connect to one Redis server (see [`LockClient::connect`]).
    pub async fn connect(self, url: &str) -> Result<LockClient, LockError> {
        self.open(Target::Server(url.to_owned()), "connect").await
    }

    /// Connect to the server of a `redis::Client` the application already
    /// has: its address, TLS settings (certificates included), user,
    /// password and database are used as they are, so they are configured
    /// once. Otherwise as [`connect`](Self::connect) (one server; the
    /// builder's prefix, timeouts, `lazy` and so on apply). The lock client
    /// opens connections of its own, speaking RESP3 whatever the given
    /// client speaks; the given client is not used after this returns.
    ///
    /// Build the `redis::Client` with [`leasehold::redis`](crate::redis),
    /// the version leasehold is built on. A `rediss://` client needs
    /// leasehold's `tls` feature ([`LockError::InvalidArgument`] without
    /// it); `tls_ca` or `tls_client_cert` (feature `tls`), when given,
    /// replace the client's own certificates. No password appears in errors or
    /// `Debug`.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// use leasehold::{LockClient, redis};
    ///
    /// // The application's own client, for its own commands.
    /// let redis = redis::Client::open("redis://app:secret@10.0.0.5:6379/2")?;
    /// // Locks on the same server, with the same credentials.
    /// let locks = LockClient::builder().connect_with(redis.clone()).await?;
    /// let guard = locks.lock("order:42").acquire().await?;
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn connect_with(self, client: redis::Client) -> Result<LockClient, LockError> {
        self.check()?;
        let address = Address::of_client(&client)?;
        #[cfg(feature = "tls")]
        if let Some(certs) = &self.settings.connect.tls
            && !address.is_tls()
        {
            let name = if certs.root_cert.is_some() {
                "tls_ca"
            } else {
                "tls_client_cert"
            };
            return Err(LockError::invalid(
                name,
                format!(
                    "the client's server `{}` is not reached over TLS: the connection would not \
                     be encrypted and the certificates given would go unused; use a rediss:// client",
                    address.shown
                ),
            ));
        }
        self.open(Target::Client(Box::new(address)), "connect_with")
            .await
    }

    /// Connect to independent masters (see [`LockClient::connect_redlock`]).
    pub async fn connect_redlock<I, S>(self, urls: I) -> Result<LockClient, LockError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        self.open(Target::Redlock(owned(urls)), "connect_redlock")
            .await
    }

    /// Connect to a Redis Cluster (see [`LockClient::connect_cluster`]).
    #[cfg(feature = "cluster")]
    pub async fn connect_cluster<I, S>(self, urls: I) -> Result<LockClient, LockError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        self.open(Target::Cluster(owned(urls)), "connect_cluster")
            .await
    }

    /// Connect through Redis Sentinel (see [`LockClient::connect_sentinel`]).
    #[cfg(feature = "sentinel")]
    #[cfg_attr(docsrs, doc(cfg(feature = "sentinel")))]
    pub async fn connect_sentinel<I, S>(
        self,
        master_name: &str,
        sentinels: I,
    ) -> Result<LockClient, LockError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        self.open(
            Target::Sentinel {
                master_name: master_name.to_owned(),
                sentinels: owned(sentinels),
            },
            "connect_sentinel",
        )
        .await
    }

    /// A client over `backend` (the fault kit's); an invalid setting falls
    /// back to the defaults, with a warning, as in [`in_memory`](Self::in_memory).
    #[cfg(feature = "testing")]
    pub(crate) fn over(self, backend: Arc<dyn Backend>) -> LockClient {
        let builder = match self.check() {
            Ok(()) => self,
            Err(error) => {
                tracing::warn!(%error, "leasehold: invalid builder setting, using the defaults");
                LockClientBuilder::default()
            }
        };
        LockClient::from_backend(backend, &builder)
    }

    /// The embedded backend (see [`LockClient::in_memory`]). An invalid prefix
    /// or TTL given to the builder falls back to the default, with a warning.
    pub fn in_memory(self) -> LockClient {
        let builder = match self.check() {
            Ok(()) => self,
            Err(error) => {
                tracing::warn!(%error, "leasehold: invalid builder setting, using the defaults");
                LockClientBuilder::default()
            }
        };
        LockClient::from_backend(crate::backend::in_memory(), &builder)
    }
}

/// The URLs as owned strings.
fn owned<I, S>(urls: I) -> Vec<String>
where
    I: IntoIterator<Item = S>,
    S: AsRef<str>,
{
    urls.into_iter().map(|u| u.as_ref().to_owned()).collect()
}

/// At least one certificate, and nothing unreadable, in PEM text.
#[cfg(feature = "tls")]
fn validate_pem_certs(name: &'static str, pem: &[u8]) -> Result<(), LockError> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let mut count = 0;
    for cert in CertificateDer::pem_slice_iter(pem) {
        cert.map_err(|e| LockError::invalid(name, format!("unreadable PEM certificate: {e}")))?;
        count += 1;
    }
    if count == 0 {
        return Err(LockError::invalid(
            name,
            "no `-----BEGIN CERTIFICATE-----` block in the PEM text",
        ));
    }
    Ok(())
}
