//! Redis: one [`Backend`] implementation, generic over the [`Topology`]
//! that carries the commands:
//!
//! - [`server`]: one server (standalone, or the primary of a replicated
//!   set), through redis-rs's reconnecting `ConnectionManager`;
//! - `cluster` (feature `cluster`): Redis Cluster, scripts routed by hash
//!   tag, renewals grouped by slot, release announcements over sharded
//!   pub/sub (`sharded`);
//! - `sentinel` (feature `sentinel`): the primary of a Sentinel-monitored
//!   set, discovered through the sentinels and followed across failovers;
//! - [`redlock`]: independent masters, each a [`server`] backend, a lock
//!   held by a majority of them (its vote counted in `redlock/tally.rs`).
//!
//! What the topologies share lives here: the scripts' calls and their
//! retries (every script is safe to send again, so a command that hit a
//! broken connection is resent once on the reconnected one, and a release
//! the server asks to retry is retried until it lands or its deadline
//! passes), announcing releases to this client's own waiters at once, and
//! the [`Gate`]: what this client knows of the server's identity, and
//! whether it may grant locks there now.

mod acquire;
#[cfg(feature = "cluster")]
pub(crate) mod cluster;
mod family;
pub(crate) mod gate;
mod inspect;
#[cfg(feature = "cluster")]
mod redirects;
pub(crate) mod redlock;
mod release;
mod scan;
#[cfg(feature = "sentinel")]
pub(crate) mod sentinel;
pub(crate) mod server;
#[cfg(feature = "cluster")]
mod sharded;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use redis::aio::ConnectionLike;
use tokio::sync::watch;

use super::listener::{Listener, Running};
use super::scripts::{self, ScriptError};
use super::wakeups::{Announcement, Wakeups};
use super::{
    Acquired, Attempt, Backend, BoxFuture, Inspected, LockKeys, Owned, Release, Renewal, Reply,
    ServerChange,
};
use crate::error::LockError;
pub(crate) use gate::Gate;
use scan::LIST_CONCURRENCY;
use scan::scan_all;
#[cfg(feature = "cluster")]
pub(crate) use scan::scan_command;

/// How the commands of a Redis backend reach the server(s).
pub(crate) trait Topology: Send + Sync + 'static {
    /// A connection that routes a lock's script to the right server.
    type Conn: ConnectionLike + Clone + Send + Sync + 'static;

    /// The command connection (a cheap clone of a multiplexed connection).
    fn connection(&self) -> Self::Conn;

    /// The command announcing releases: `PUBLISH`, or `SPUBLISH` (Cluster).
    fn publish(&self) -> &'static str {
        "PUBLISH"
    }

    /// Renew a batch in as few round trips as possible, with the native
    /// commands `offered` has where they serve.
    fn renew<'a>(
        &'a self,
        batch: &'a [Renewal],
        offered: &'a scripts::Offered,
    ) -> BoxFuture<'a, Result<Vec<Owned>, ScriptError>> {
        Box::pin(async move {
            let mut con = self.connection();
            scripts::renew(&mut con, batch, offered).await
        })
    }

    /// The names of the keys matching `glob`, by `SCAN` with a cursor (never
    /// `KEYS`), on every server that holds keys (every primary of a
    /// cluster). A key may appear twice (a rehash, a slot moving).
    fn scan<'a>(&'a self, glob: &'a str) -> BoxFuture<'a, Result<Vec<String>, redis::RedisError>> {
        Box::pin(async move {
            let mut con = self.connection();
            scan_all(&mut con, glob).await
        })
    }

    /// Start the listener task on a new pub/sub connection.
    fn start_listener(&self, wakeups: Arc<Wakeups>) -> Reply<'_, Running>;

    /// Whether `WAIT` applies (one primary behind the connection): Redis
    /// Cluster refuses a synced acquisition instead.
    fn waits_for_replicas(&self) -> bool {
        true
    }

    /// Whether a first attempt may take the fast path (`scripts/fast.rs`):
    /// its pipeline (`SET`, `GET`, `TIME`) must reach one server, which a
    /// cluster connection does not promise for `TIME`.
    fn fast_path(&self) -> bool {
        true
    }

    /// Whether every key lives on one server, so that one script may touch
    /// keys of different hash tags (false on Redis Cluster).
    fn one_slot(&self) -> bool {
        true
    }

    /// Whether the Redis names `names` live in one slot (always on one
    /// server).
    fn same_slot(&self, _names: &[&str]) -> bool {
        true
    }

    /// The slot of a lock's names, where the gate keeps state per server
    /// (Redis Cluster: per primary); `None` for one server.
    fn slot_of(&self, _keys: &LockKeys) -> Option<u16> {
        None
    }

    /// Read the identity of the server that serves `slot` (every server
    /// behind the connection, by default) and apply it to `gate`: before a
    /// grant on a server not checked since its connection could have
    /// changed.
    fn verify<'a>(&'a self, gate: &'a Gate, _slot: Option<u16>) -> Reply<'a, ()> {
        Box::pin(async move {
            let mut con = self.connection();
            gate.check(&mut con, false).await
        })
    }
}

pub(crate) struct RedisBackend<T: Topology> {
    topology: T,
    /// The server(s), credentials redacted.
    server: String,
    listener: Listener,
    gate: Arc<Gate>,
}

impl<T: Topology> RedisBackend<T> {
    pub(crate) fn new(topology: T, server: String, wakeups: Arc<Wakeups>, gate: Arc<Gate>) -> Self {
        RedisBackend {
            topology,
            server,
            listener: Listener::new(wakeups),
            gate,
        }
    }

    /// Whether `lock_all.lua` goes in its compact form (one server,
    /// releases announced with `PUBLISH`): then also its modes after the
    /// native free case, which only that form takes.
    pub(super) fn compact_lock_all(&self) -> bool {
        self.topology.one_slot() && self.topology.publish() == "PUBLISH"
    }

    pub(crate) fn topology(&self) -> &T {
        &self.topology
    }

    pub(crate) fn gate(&self) -> &Gate {
        &self.gate
    }

    /// The server(s), credentials redacted.
    pub(crate) fn server(&self) -> &str {
        &self.server
    }

    /// Run one script call; a command that hit a broken connection is sent
    /// once more on the reconnected one (every script is safe to resend).
    async fn call<R, F, Fut>(&self, op: F) -> Result<R, ScriptError>
    where
        F: Fn(T::Conn) -> Fut,
        Fut: Future<Output = Result<R, ScriptError>>,
    {
        self.resend_once(|| op(self.topology.connection())).await
    }

    /// `op`, and once more if its connection broke.
    async fn resend_once<R, F, Fut>(&self, op: F) -> Result<R, ScriptError>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<R, ScriptError>>,
    {
        match op().await {
            Err(e) if e.connection_broke() => {
                tracing::debug!(server = %self.server, error = ?e, "leasehold: connection broke, sending again");
                // Boxed: the resend's future would otherwise double the
                // size of every call's.
                Box::pin(op()).await
            }
            other => other,
        }
    }

    /// The renewal of a batch, through the topology.
    pub(crate) async fn renew_script(&self, batch: &[Renewal]) -> Result<Vec<Owned>, LockError> {
        let offered = self.gate.offered();
        let result = self
            .resend_once(|| self.topology.renew(batch, offered))
            .await;
        result.map_err(|e| match e {
            ScriptError::Redis(e) => scripts::script_backend_error(&self.server, e),
            wrong @ ScriptError::WrongType { .. } => {
                LockError::backend(&self.server, format!("{wrong:?}"))
            }
        })
    }
}

impl<T: Topology> Backend for RedisBackend<T> {
    fn acquire<'a>(&'a self, attempt: Attempt<'a>) -> Reply<'a, Acquired> {
        // Plain locks, and `lock_all` on one server (its native free
        // case): the family has scripts of its own.
        let fast_ok = attempt.fence_floor.is_none()
            && match attempt.keys.kind {
                super::keys::Kind::Lock => true,
                super::keys::Kind::All(_) => self.compact_lock_all(),
                _ => false,
            }
            && self.topology.fast_path();
        let attempt = Attempt {
            fast: attempt.fast && fast_ok,
            after_fast: attempt.after_fast && fast_ok,
            ..attempt
        };
        // The common case, a first attempt on a server already checked, has
        // a future of its own, a few hundred bytes: boxing the scripts' and
        // the checks' futures on every acquisition cost a large allocation
        // (glibc's locked arena, not its per-thread cache) and its copy.
        // The connection's number is read before the server is known to be
        // checked: a disconnection after this reading changes the number,
        // and the grant is checked again (`settle`); one before it has
        // already cleared the check (see `Gate::disconnected`).
        let connection = self.gate.connection_number();
        if attempt.fast && self.gate.is_verified() {
            Box::pin(self.acquire_fast(attempt, connection))
        } else {
            Box::pin(self.acquire_checked(attempt, connection))
        }
    }

    fn records_lazily(&self) -> bool {
        self.topology.fast_path()
    }

    fn place_life(&self) -> Duration {
        self.gate.place_life()
    }

    fn keep_place<'a>(&'a self, keys: &'a LockKeys, token: &'a str) -> Reply<'a, Option<Duration>> {
        Box::pin(async move {
            let life = self.gate.place_life();
            let one = |keys: &'a LockKeys| async move {
                self.call(|mut con| async move {
                    scripts::keep_place(&mut con, keys, token, life).await
                })
                .await
                .map_err(|e| e.into_lock_error(&self.server, keys))
            };
            if let super::keys::Kind::All(all) = &keys.kind {
                // Every line the `lock_all` waits in. Gone from any, or
                // every key free (a release's announcement lost): look
                // again. A free key while another is held is most likely
                // kept for it (it leads that line): looking again would
                // only be told busy, so it sleeps on the soonest lease to
                // end among the held keys.
                let kept = futures_util::future::join_all(all.keys.iter().map(one)).await;
                let mut soonest = None;
                for kept in kept {
                    match kept? {
                        scripts::Kept::Gone => return Ok(None),
                        scripts::Kept::Free => {}
                        scripts::Kept::Held(left) => {
                            soonest = Some(soonest.map_or(left, |s: Duration| s.min(left)));
                        }
                    }
                }
                return Ok(soonest);
            }
            Ok(match one(keys).await? {
                scripts::Kept::Held(left) => Some(left),
                scripts::Kept::Free | scripts::Kept::Gone => None,
            })
        })
    }

    fn keeps_places(&self) -> bool {
        true
    }

    fn stand_in_line(&self, keys: &LockKeys, ttl: Duration, stands: bool) {
        // As the gate judges them (see `RedisBackend::admit`): across slots, each key
        // of a `lock_all` on its own primary.
        if let super::keys::Kind::All(all) = &keys.kind
            && !self.topology.one_slot()
        {
            for keys in &all.keys {
                self.stand_in_line(keys, ttl, stands);
            }
            return;
        }
        self.gate
            .stand(keys.key(), self.topology.slot_of(keys), ttl, stands);
    }

    fn admit_grant<'a>(&'a self, keys: &'a LockKeys, ttl: Duration) -> Reply<'a, ()> {
        Box::pin(async move {
            if !self.gate.is_verified() {
                self.verify(keys).await?;
            }
            // The lock key is the handed lease: no evidence of survival.
            self.admit_granted(keys, ttl).await
        })
    }

    fn abandon<'a>(&'a self, keys: &'a LockKeys, token: &'a str) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            if keys.kind.is_shared() {
                return self.family_abandon(keys, token).await;
            }
            if let super::keys::Kind::All(all) = &keys.kind {
                for keys in &all.keys {
                    self.abandon(keys, token).await;
                }
                return;
            }
            let publish = self.topology.publish();
            let result = self
                .call(
                    |mut con| async move { scripts::abandon(&mut con, keys, token, publish).await },
                )
                .await;
            match result {
                Ok(true) => self
                    .listener
                    .wakeups
                    .announce(keys.channel(), Announcement::Free(token)),
                Ok(false) => {}
                Err(e) => {
                    tracing::debug!(key = %keys.key(), error = ?e, "leasehold: could not abandon an acquisition; its traces lapse");
                }
            }
        })
    }

    fn release<'a>(&'a self, release: Release<'a>) -> Reply<'a, Owned> {
        // Each kind its own future, so that a plain lock's release boxes
        // only what it awaits (see `acquire`).
        if release.keys.kind.is_shared() {
            return Box::pin(self.family_release(release));
        }
        if let super::keys::Kind::All(all) = &release.keys.kind {
            return Box::pin(self.release_all(all, release));
        }
        Box::pin(self.release_lock(release))
    }

    fn renew<'a>(&'a self, batch: &'a [Renewal]) -> Reply<'a, Vec<Owned>> {
        Box::pin(async move {
            let owned = if batch
                .iter()
                .any(|item| !matches!(item.keys.kind, super::keys::Kind::Lock))
            {
                self.renew_with_family(batch).await?
            } else {
                self.renew_script(batch).await?
            };
            // Held for another lease: remembered as asks. Found there after
            // a change: their keys survived it.
            self.gate.renewed(
                batch
                    .iter()
                    .zip(&owned)
                    .filter(|(_, o)| **o == Owned::Yes)
                    .map(|(renewal, _)| {
                        let slot = self.topology.slot_of(&renewal.keys);
                        (renewal.keys.key(), slot, renewal.ttl)
                    }),
            );
            Ok(owned)
        })
    }

    fn inspect<'a>(&'a self, keys: &'a LockKeys) -> Reply<'a, Option<Inspected>> {
        Box::pin(self.inspect_script(keys, true))
    }

    fn list<'a>(&'a self, prefix: &'a str, pattern: &'a str) -> Reply<'a, Vec<Inspected>> {
        Box::pin(async move {
            use futures_util::StreamExt;
            let keys = self.scan_lock_keys(prefix, pattern).await?;
            let found: Vec<Result<Option<Inspected>, LockError>> = futures_util::stream::iter(keys)
                .map(|key| async move {
                    self.inspect_script(&LockKeys::listed(prefix, &key), true)
                        .await
                })
                .buffered(LIST_CONCURRENCY)
                .collect()
                .await;
            // A lock released between the scan and its inspection is left
            // out, and so is a key that is not a leasehold lock.
            found
                .into_iter()
                .filter_map(|found| super::listed(found).transpose())
                .collect()
        })
    }

    fn force_release<'a>(&'a self, keys: &'a LockKeys) -> Reply<'a, bool> {
        Box::pin(async move { Ok(self.force_release_script(keys).await?.is_some()) })
    }

    fn listen<'a>(&'a self, keys: &'a LockKeys) -> Reply<'a, ()> {
        Box::pin(self.listener.listen(keys.channel(), || {
            self.topology.start_listener(self.listener.wakeups.clone())
        }))
    }

    fn unlisten(&self, keys: &LockKeys) {
        self.listener.unlisten(keys.channel());
    }

    fn sync_replicas<'a>(
        &'a self,
        _keys: &'a LockKeys,
        replicas: usize,
        timeout: Duration,
    ) -> Reply<'a, usize> {
        if self.topology.waits_for_replicas() {
            return Box::pin(wait_for_replicas(
                self.topology.connection(),
                &self.server,
                replicas,
                timeout,
            ));
        }
        let server = self.server.clone();
        Box::pin(async move {
            Err(LockError::invalid(
                "replica_sync",
                format!("replica sync is not available on {server}"),
            ))
        })
    }

    fn wakeups(&self) -> &Wakeups {
        &self.listener.wakeups
    }

    fn changes(&self) -> Option<watch::Receiver<ServerChange>> {
        Some(self.gate.changes())
    }

    fn describe(&self) -> String {
        self.server.clone()
    }
}

/// Redis `WAIT` on `con`: how many replicas acknowledged the writes made on
/// it so far (the acquisition was sent on it just before), within `timeout`.
async fn wait_for_replicas<C: ConnectionLike>(
    mut con: C,
    server: &str,
    replicas: usize,
    timeout: Duration,
) -> Result<usize, LockError> {
    let acked: i64 = redis::cmd("WAIT")
        .arg(replicas)
        .arg(super::connect::millis(timeout))
        .query_async(&mut con)
        .await
        .map_err(|e| super::connect::backend_error(server, e))?;
    Ok(usize::try_from(acked).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::time::Instant;

    /// The size of the future `f` returns, from its type alone (`f` is
    /// never called).
    fn future_size<'a, Fut: Future>(
        _: impl FnOnce(&'a RedisBackend<server::Server>) -> Fut,
    ) -> usize {
        std::mem::size_of::<Fut>()
    }

    /// glibc serves allocations of up to 1,032 bytes from a per-thread
    /// cache; larger ones take an arena's lock. A plain lock's acquisition
    /// and release box one future each on every call: they must stay
    /// under that size (they were 1,344 and 1,688 bytes before they were
    /// split from the rare paths).
    #[test]
    fn the_common_path_futures_fit_the_allocators_thread_cache() {
        const CACHED: usize = 1032;
        let fast = future_size(|backend: &'static RedisBackend<server::Server>| {
            let keys: &'static LockKeys = Box::leak(Box::new(LockKeys::new("p", "k")));
            backend.acquire_fast(
                Attempt {
                    keys,
                    token: "t",
                    ttl: Duration::from_secs(1),
                    in_line: false,
                    fence_floor: None,
                    fast: true,
                    after_fast: false,
                    sent_us: 0,
                },
                0,
            )
        });
        let release = future_size(|backend: &'static RedisBackend<server::Server>| {
            let keys: &'static LockKeys = Box::leak(Box::new(LockKeys::new("p", "k")));
            backend.release_lock(Release {
                keys,
                token: "t",
                keep: Duration::ZERO,
                deadline: Instant::now(),
                granted_at: Instant::now(),
            })
        });
        assert!(
            fast <= CACHED,
            "the fast acquisition's future is {fast} bytes"
        );
        assert!(
            release <= CACHED,
            "a plain release's future is {release} bytes"
        );
    }
}
