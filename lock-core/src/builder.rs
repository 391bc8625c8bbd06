//! How a [`LockClient`] is made: the `connect*` constructors, each the
//! [`LockClientBuilder`] with its defaults, and the builder's settings
//! (prefix, timeouts, name, the restart gate's, TLS material, laziness),
//! checked before anything connects. What a client does once made is in
//! `client.rs`.

use std::sync::Arc;
use std::time::Duration;

use crate::backend::Backend;
use crate::backend::connect::Address;
use crate::backend::target::Target;
use crate::client::LockClient;
use crate::config::{ReplicaSync, Settings};
use crate::error::LockError;
use crate::limits::{
    MAX_PLACE_LIFE, MIN_PLACE_LIFE, require_runtime, validate_prefix, validate_ttl,
};
use crate::request::Shared;
use crate::watchdog::Watchdog;

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
    /// [`LockRequest::replica_sync`](crate::LockRequest::replica_sync). The response timeout is raised above
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

    /// How long a waiter's place in line outlives its client's last sign of
    /// life (default 2 s). A waiting client keeps its places alive every
    /// third of this (one small script per place while it sleeps); a
    /// waiter whose process dies, freezes or loses its connection is
    /// passed over by the line this long after its last keep-alive, and a
    /// release hands a waiter a lease of at most this long until its client
    /// extends it (a third of it later, in the background), so a waiter
    /// that died just before it was handed the lock holds the line up no
    /// longer either. Shorter: a crashed waiter costs the others less, and
    /// waiting costs more keep-alives; longer: the reverse (an election's
    /// standby that waits for hours may prefer a few seconds more).
    /// Between 300 ms and an hour, else connecting fails with
    /// [`LockError::InvalidArgument`]. Only a *holder* that dies keeps a
    /// lock for its whole lease.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), leasehold::LockError> {
    /// use std::time::Duration;
    ///
    /// let client = leasehold::LockClient::builder()
    ///     .place_life(Duration::from_secs(5))
    ///     .connect("redis://127.0.0.1:6379")
    ///     .await?;
    /// # drop(client); Ok(()) }
    /// ```
    pub fn place_life(mut self, life: Duration) -> Self {
        if !(MIN_PLACE_LIFE..=MAX_PLACE_LIFE).contains(&life) {
            self.invalid = Some(LockError::invalid(
                "place_life",
                format!(
                    "{life:?} is out of range: a place in line lives between {MIN_PLACE_LIFE:?} \
                     and {MAX_PLACE_LIFE:?}"
                ),
            ));
        }
        self.settings.gate.place_life = life;
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
        LockClient::from_backend(crate::backend::memory::MemoryBackend::shared(), &builder)
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
