//! Redis: one [`Backend`] implementation, generic over the [`Topology`]
//! that carries the commands:
//!
//! - [`server`]: one server (standalone, or the primary of a replicated
//!   set), through redis-rs's reconnecting `ConnectionManager`;
//! - `cluster` (feature `cluster`): Redis Cluster, scripts routed by hash
//!   tag, renewals grouped by slot, release announcements over sharded
//!   pub/sub (`sharded`).
//!
//! What the topologies share lives here: the scripts' calls and their
//! retries (every script is safe to send again, so a command that hit a
//! broken connection is resent once on the reconnected one, and a release
//! the server asks to retry is retried until it lands or its deadline
//! passes), announcing releases to this client's own waiters at once, and
//! the [`Gate`]: what this client knows of the server's identity, and
//! whether it may grant locks there now.

#[cfg(feature = "cluster")]
pub(crate) mod cluster;
pub(crate) mod gate;
pub(crate) mod server;
#[cfg(feature = "cluster")]
mod sharded;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use redis::aio::ConnectionLike;
use tokio::sync::watch;
use tokio::time::Instant;

use super::connect::is_retryable;
use super::listener::{Listener, Running};
use super::scripts::{self, ScriptError};
use super::wakeups::{Announcement, Wakeups};
use super::{Acquired, Backend, BoxFuture, LockKeys, Owned, Renewal, ServerChange};
use crate::error::LockError;
pub(crate) use gate::Gate;

/// The longest pause between two tries of a release the server asked to
/// retry (`TRYAGAIN` during a slot migration, a reconnect).
const MAX_RELEASE_RETRY_DELAY: Duration = Duration::from_millis(200);

/// How the commands of a Redis backend reach the server(s).
pub(crate) trait Topology: Send + Sync + 'static {
    /// A connection that routes a lock's script to the right server.
    type Conn: ConnectionLike + Clone + Send + Sync + 'static;

    /// The command connection (a cheap clone of a multiplexed connection).
    fn connection(&self) -> Self::Conn;

    /// The command announcing releases: `PUBLISH`, or `SPUBLISH`.
    fn publish(&self) -> &'static str;

    /// Renew a batch in as few round trips as possible.
    fn renew<'a>(&'a self, batch: &'a [Renewal]) -> BoxFuture<'a, Result<Vec<Owned>, ScriptError>> {
        Box::pin(async move {
            let mut con = self.connection();
            scripts::renew(&mut con, batch).await
        })
    }

    /// Start the listener task on a new pub/sub connection.
    fn start_listener(&self, wakeups: Arc<Wakeups>) -> BoxFuture<'_, Result<Running, LockError>>;

    /// Redis `WAIT`: how many replicas acknowledged the writes so far.
    fn sync_replicas(
        &self,
        _replicas: usize,
        _timeout: Duration,
    ) -> Option<BoxFuture<'_, Result<usize, LockError>>> {
        None
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

    pub(crate) fn topology(&self) -> &T {
        &self.topology
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
        match op(self.topology.connection()).await {
            Err(ScriptError::Redis(e)) if e.is_io_error() || e.is_connection_dropped() => {
                tracing::debug!(server = %self.server, error = %e, "leasehold: connection broke, sending again");
                op(self.topology.connection()).await
            }
            other => other,
        }
    }

    /// The acquire script, with no gate check (Redlock checks each node's
    /// gate itself, and the single-server acquire below too).
    pub(crate) async fn acquire_script(
        &self,
        keys: &LockKeys,
        token: &str,
        ttl: Duration,
        in_line: bool,
    ) -> Result<Acquired, LockError> {
        self.gate.issued(ttl);
        self.call(
            |mut con| async move { scripts::acquire(&mut con, keys, token, ttl, in_line).await },
        )
        .await
        .map_err(|e| e.into_lock_error(&self.server, keys))
    }

    /// The release script, retried while the server asks to and `deadline`
    /// has not passed.
    pub(crate) async fn release_script(
        &self,
        keys: &LockKeys,
        token: &str,
        keep: Duration,
        deadline: Instant,
    ) -> Result<scripts::Released, LockError> {
        let publish = self.topology.publish();
        let mut delay = Duration::from_millis(10);
        loop {
            let result = self
                .call(|mut con| async move {
                    scripts::release(&mut con, keys, token, keep, publish).await
                })
                .await;
            match result {
                Err(e)
                    if e.redis().is_some_and(is_retryable) && Instant::now() + delay < deadline =>
                {
                    tracing::debug!(key = %keys.key, error = ?e, "leasehold: release not applied yet, retrying");
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(MAX_RELEASE_RETRY_DELAY);
                }
                other => return other.map_err(|e| e.into_lock_error(&self.server, keys)),
            }
        }
    }

    /// The renewal of a batch, through the topology.
    pub(crate) async fn renew_script(&self, batch: &[Renewal]) -> Result<Vec<Owned>, LockError> {
        let result = match self.topology.renew(batch).await {
            Err(ScriptError::Redis(e)) if e.is_io_error() || e.is_connection_dropped() => {
                self.topology.renew(batch).await
            }
            other => other,
        };
        result.map_err(|e| match e {
            ScriptError::Redis(e) => scripts::script_backend_error(&self.server, e),
            wrong @ ScriptError::WrongType { .. } => {
                LockError::backend(&self.server, format!("{wrong:?}"))
            }
        })
    }
}

impl<T: Topology> Backend for RedisBackend<T> {
    fn acquire<'a>(
        &'a self,
        keys: &'a LockKeys,
        token: &'a str,
        ttl: Duration,
        in_line: bool,
    ) -> BoxFuture<'a, Result<Acquired, LockError>> {
        Box::pin(async move {
            if let Some(closed) = self.gate.closed(&keys.key)? {
                return Ok(closed);
            }
            self.acquire_script(keys, token, ttl, in_line).await
        })
    }

    fn abandon<'a>(&'a self, keys: &'a LockKeys, token: &'a str) -> BoxFuture<'a, ()> {
        Box::pin(async move {
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
                    .announce(&keys.channel, Announcement::Free(token)),
                Ok(false) => {}
                Err(e) => {
                    tracing::debug!(key = %keys.key, error = ?e, "leasehold: could not abandon an acquisition; its traces lapse");
                }
            }
        })
    }

    fn release<'a>(
        &'a self,
        keys: &'a LockKeys,
        token: &'a str,
        keep: Duration,
        deadline: Instant,
    ) -> BoxFuture<'a, Result<Owned, LockError>> {
        Box::pin(async move {
            let released = self.release_script(keys, token, keep, deadline).await?;
            if released.owned == Owned::Yes {
                // This client's own waiters hear it at once (others by
                // pub/sub): the first in line if it is ours, else our first.
                let announcement = match &released.next {
                    Some(next) => Announcement::Next(next),
                    None => Announcement::Free(token),
                };
                self.listener.wakeups.announce(&keys.channel, announcement);
            }
            Ok(released.owned)
        })
    }

    fn renew<'a>(&'a self, batch: &'a [Renewal]) -> BoxFuture<'a, Result<Vec<Owned>, LockError>> {
        Box::pin(self.renew_script(batch))
    }

    fn listen<'a>(&'a self, keys: &'a LockKeys) -> BoxFuture<'a, Result<(), LockError>> {
        Box::pin(self.listener.listen(&keys.channel, || {
            self.topology.start_listener(self.listener.wakeups.clone())
        }))
    }

    fn unlisten(&self, keys: &LockKeys) {
        self.listener.unlisten(&keys.channel);
    }

    fn sync_replicas<'a>(
        &'a self,
        _keys: &'a LockKeys,
        replicas: usize,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<usize, LockError>> {
        match self.topology.sync_replicas(replicas, timeout) {
            Some(waiting) => waiting,
            None => {
                let server = self.server.clone();
                Box::pin(async move {
                    Err(LockError::invalid(
                        "replica_sync",
                        format!("replica sync is not available on {server}"),
                    ))
                })
            }
        }
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
