//! Redis Cluster, through redis-rs's cluster-async connection.
//!
//! - **Routing.** Every Redis name of one lock carries the lock's key as its
//!   hash tag (see [`super`]), so each script touches one slot and the cluster
//!   connection routes it to that slot's master. `MOVED` (the slot has moved)
//!   and `ASK` (it is being migrated) are followed by redis-rs, which also
//!   refreshes its slot map; `TRYAGAIN` is retried after a short pause.
//!   While a slot is half-migrated, Redis runs a multi-key script only if
//!   all its keys are on one side: renewing and extending a held lock (one
//!   key) work throughout, but taking or releasing a lock in that slot (the
//!   lock, its fence and its line) can answer `TRYAGAIN` until the migration
//!   ends. A request retries within its `wait` budget; a failed release
//!   leaves the lease to expire.
//! - **Scripts.** They are loaded on every node at connect; a node that lacks
//!   one later (restarted, added, or reached through `ASK`) answers `NOSCRIPT`,
//!   and the invocation loads it (`SCRIPT LOAD` goes to all nodes) and retries.
//! - **Renewal.** A script cannot span slots (`CROSSSLOT`), so the watchdog's
//!   batch is split by slot, one renewal script per slot, all sent at once
//!   over the multiplexed node connections: the round trips overlap, and the
//!   results come back in the batch's order.
//! - **Release notifications.** On Redis ≥ 7 (checked once at connect), the
//!   release script publishes with `SPUBLISH` and waiters listen with
//!   `SSUBSCRIBE`: the message stays on the shard that owns the lock instead of
//!   being broadcast to every node. Older servers get `PUBLISH`/`SUBSCRIBE`.
//!   The listener is one extra RESP3 cluster connection, opened on the first
//!   wait. When a slot moves, the old owner drops its sharded subscriptions
//!   (a server-sent `SUNSUBSCRIBE`); the listener subscribes again on the new
//!   owner and wakes that lock's first waiter, since a release may have been
//!   published in between.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use futures_util::future::join_all;
use redis::cluster::{ClusterClient, ClusterClientBuilder};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::Slot;
use redis::{
    ConnectionInfo, ErrorKind, ProtocolVersion, PushInfo, PushKind, RedisError, RedisResult, Value,
};
use tokio::sync::mpsc;

use super::redis::{
    acquire_with, backend_error, leave_with, parse_url, release_with, renew_on,
    within_connect_timeout,
};
use super::subscriber::{Listening, PubSubConnection, Subscriber};
use super::{Acquired, Backend, BoxFuture, LockKeys, Owned, Renewal};
use crate::client::ConnectOptions;
use crate::error::{LockError, redact_url};
use crate::scripts;
use crate::waiting::WaitList;

/// Retries of one request (redirects, `TRYAGAIN`, reconnects), at least this
/// many: following a migration can take a `MOVED`, an `ASK` and a `TRYAGAIN`.
const MIN_RETRIES: u32 = 6;

pub(crate) struct ClusterBackend {
    conn: ClusterConnection,
    /// The seed nodes, for the listener connection opened on the first wait.
    nodes: Vec<ConnectionInfo>,
    options: ConnectOptions,
    /// `cluster[redis://a:***@h:p, ...]`.
    server: String,
    /// Sharded pub/sub (`SPUBLISH`/`SSUBSCRIBE`, Redis ≥ 7).
    sharded: bool,
    listening: Listening,
}

impl ClusterBackend {
    /// Connect through any of the cluster's nodes (the others are discovered).
    pub(crate) async fn connect(
        urls: &[String],
        options: &ConnectOptions,
    ) -> Result<ClusterBackend, LockError> {
        if urls.is_empty() {
            return Err(LockError::invalid(
                "urls",
                "a Redis Cluster needs the URL of at least one of its nodes",
            ));
        }
        let shown: Vec<String> = urls.iter().map(|url| redact_url(url)).collect();
        let server = format!("cluster[{}]", shown.join(", "));
        let nodes = urls
            .iter()
            .zip(&shown)
            .map(|(url, shown)| parse_url(url, shown))
            .collect::<Result<Vec<_>, _>>()?;

        let client = build_client(cluster_builder(&nodes, options), &server)?;
        let mut conn =
            within_connect_timeout(client.get_async_connection(), options, &server).await?;
        let sharded = supports_sharded_pubsub(&mut conn)
            .await
            .map_err(|e| backend_error(&server, e))?;
        for script in [
            &*scripts::ACQUIRE,
            &*scripts::RELEASE,
            &*scripts::RENEW,
            &*scripts::LEAVE,
        ] {
            // Routed to every node. Only saves a NOSCRIPT round trip later.
            script
                .load_async(&mut conn)
                .await
                .map_err(|e| backend_error(&server, e))?;
        }

        Ok(ClusterBackend {
            conn,
            nodes,
            options: options.clone(),
            server,
            sharded,
            listening: Listening::new(Arc::default()),
        })
    }

    fn error(&self, err: RedisError) -> LockError {
        backend_error(&self.server, err)
    }

    /// The release notification command of this cluster.
    fn publish_command(&self) -> &'static str {
        if self.sharded { "SPUBLISH" } else { "PUBLISH" }
    }

    /// The release listener: one RESP3 connection, opened on the first wait.
    async fn start_listener(&self) -> Result<Subscriber, LockError> {
        let (push_tx, push_rx) = mpsc::unbounded_channel();
        let builder = cluster_builder(&self.nodes, &self.options)
            .use_protocol(ProtocolVersion::RESP3)
            .push_sender(push_tx);
        let client = build_client(builder, &self.server)?;
        let conn =
            within_connect_timeout(client.get_async_connection(), &self.options, &self.server)
                .await?;
        let wanted: Wanted = Arc::default();
        let (listener_tx, listener_rx) = mpsc::unbounded_channel();
        if self.sharded {
            tokio::spawn(follow_moved_subscriptions(
                push_rx,
                listener_tx,
                conn.clone(),
                wanted.clone(),
                self.listening.waiters.clone(),
            ));
        } else {
            tokio::spawn(forward(push_rx, listener_tx));
        }
        let pubsub = ClusterPubSub {
            conn,
            sharded: self.sharded,
            wanted,
        };
        Ok(Subscriber::spawn(
            pubsub,
            listener_rx,
            self.server.clone(),
            self.listening.waiters.clone(),
        ))
    }

    /// Renew a batch spread over many slots: one script per slot, all in
    /// flight at once; results in the batch's order.
    async fn renew_by_slot(&self, batch: &[Renewal]) -> Result<Vec<Owned>, LockError> {
        let mut groups: HashMap<Slot, Vec<usize>> = HashMap::new();
        for (index, item) in batch.iter().enumerate() {
            groups
                .entry(Slot::for_key(item.keys.lock.as_bytes()))
                .or_default()
                .push(index);
        }
        if groups.len() <= 1 {
            let mut con = self.conn.clone();
            return renew_on(&mut con, batch).await.map_err(|e| self.error(e));
        }

        let calls = groups.into_values().map(|indices| {
            let mut con = self.conn.clone();
            async move {
                let items: Vec<Renewal> = indices.iter().map(|&i| batch[i].clone()).collect();
                let codes = renew_on(&mut con, &items).await;
                (indices, codes)
            }
        });
        let mut out = vec![Owned::No; batch.len()];
        for (indices, codes) in join_all(calls).await {
            let codes = codes.map_err(|e| self.error(e))?;
            if codes.len() != indices.len() {
                return Err(LockError::backend(
                    &self.server,
                    format!(
                        "the renewal script answered {} results for {} leases",
                        codes.len(),
                        indices.len()
                    ),
                ));
            }
            for (index, code) in indices.into_iter().zip(codes) {
                out[index] = code;
            }
        }
        Ok(out)
    }
}

/// Parse one node URL, with any error message redacted.
fn cluster_builder(nodes: &[ConnectionInfo], options: &ConnectOptions) -> ClusterClientBuilder {
    let retries = u32::try_from(options.reconnect_retries)
        .unwrap_or(u32::MAX)
        .max(MIN_RETRIES);
    ClusterClient::builder(nodes.to_vec())
        .connection_timeout(options.connect_timeout)
        .response_timeout(options.response_timeout)
        .retries(retries)
        // redis-rs waits at least 1.28 s before retrying a `TRYAGAIN` or a
        // `CLUSTERDOWN` by default: longer than many leases.
        .min_retry_wait(10)
        .max_retry_wait(500)
        .retry_wait_formula(10, 2)
}

fn build_client(builder: ClusterClientBuilder, server: &str) -> Result<ClusterClient, LockError> {
    builder.build().map_err(|e| {
        if e.kind() == ErrorKind::InvalidClientConfig {
            // Unix sockets, or seed nodes with different credentials, databases, TLS modes.
            LockError::invalid("urls", format!("{server}: {e}"))
        } else {
            backend_error(server, e)
        }
    })
}

/// Open a cluster connection (slot map and node connections) within the
/// connect timeout.
/// Whether the servers know `SPUBLISH` (Redis ≥ 7). A server that refuses
/// `COMMAND INFO` (renamed or forbidden, as on some managed services) gets
/// plain pub/sub, which works everywhere.
async fn supports_sharded_pubsub(conn: &mut ClusterConnection) -> RedisResult<bool> {
    let reply: RedisResult<Vec<Value>> = redis::cmd("COMMAND")
        .arg("INFO")
        .arg("SPUBLISH")
        .query_async(conn)
        .await;
    match reply {
        Ok(info) => Ok(matches!(info.first(), Some(v) if *v != Value::Nil)),
        Err(e) if matches!(e.kind(), ErrorKind::Server(_)) => {
            tracing::debug!(error = %e, "leasehold: COMMAND INFO refused; using PUBLISH");
            Ok(false)
        }
        Err(e) => Err(e),
    }
}

/// The release channels the listener wants to be subscribed to.
type Wanted = Arc<Mutex<HashSet<String>>>;

fn lock_wanted(wanted: &Wanted) -> MutexGuard<'_, HashSet<String>> {
    // Every update is a single insert or remove.
    wanted.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The listener's connection: sharded pub/sub where the servers have it.
struct ClusterPubSub {
    conn: ClusterConnection,
    sharded: bool,
    wanted: Wanted,
}

impl PubSubConnection for ClusterPubSub {
    fn subscribe<'a>(&'a mut self, channel: &'a str) -> BoxFuture<'a, RedisResult<()>> {
        Box::pin(async move {
            lock_wanted(&self.wanted).insert(channel.to_owned());
            let result = if self.sharded {
                self.conn.ssubscribe(channel).await
            } else {
                self.conn.subscribe(channel).await
            };
            if result.is_err() {
                lock_wanted(&self.wanted).remove(channel);
            }
            result
        })
    }

    fn unsubscribe<'a>(&'a mut self, channel: &'a str) -> BoxFuture<'a, RedisResult<()>> {
        Box::pin(async move {
            lock_wanted(&self.wanted).remove(channel);
            if self.sharded {
                self.conn.sunsubscribe(channel).await
            } else {
                self.conn.unsubscribe(channel).await
            }
        })
    }
}

/// Pass pushes on to the listener until either side is gone.
async fn forward(mut from: mpsc::UnboundedReceiver<PushInfo>, to: mpsc::UnboundedSender<PushInfo>) {
    loop {
        tokio::select! {
            push = from.recv() => match push {
                Some(push) => if to.send(push).is_err() { return },
                None => return,
            },
            () = to.closed() => return,
        }
    }
}

/// Like [`forward`], and when a node drops a sharded subscription the
/// listener still wants (the slot moved away from it), subscribe again (the
/// cluster connection follows the `MOVED` to the new owner) and wake the
/// first waiter of that lock, who may have missed a release meanwhile.
///
/// Holds a clone of the listener's connection, so it must end with the
/// listener: it does when the listener's push receiver is dropped.
async fn follow_moved_subscriptions(
    mut from: mpsc::UnboundedReceiver<PushInfo>,
    to: mpsc::UnboundedSender<PushInfo>,
    mut conn: ClusterConnection,
    wanted: Wanted,
    waiters: Arc<WaitList>,
) {
    loop {
        let push = tokio::select! {
            push = from.recv() => match push {
                Some(push) => push,
                None => return,
            },
            () = to.closed() => return,
        };
        if push.kind == PushKind::SUnsubscribe
            && let Some(Value::BulkString(channel)) = push.data.first()
            && let Ok(channel) = std::str::from_utf8(channel)
            && lock_wanted(&wanted).contains(channel)
        {
            let channel = channel.to_owned();
            tracing::debug!(
                channel,
                "leasehold: sharded subscription dropped; resubscribing"
            );
            if let Err(e) = conn.ssubscribe(&channel).await {
                tracing::debug!(channel, error = %e, "leasehold: resubscribe failed");
            }
            // Wake the first waiter: a release may have gone by unheard.
            waiters.wake_first(&channel);
        }
        if to.send(push).is_err() {
            return;
        }
    }
}

impl Backend for ClusterBackend {
    fn acquire<'a>(
        &'a self,
        keys: &'a LockKeys,
        token: &'a str,
        ttl: Duration,
        in_line: bool,
    ) -> BoxFuture<'a, Result<Acquired, LockError>> {
        Box::pin(acquire_with(
            self.conn.clone(),
            &self.server,
            (keys, token, ttl),
            in_line,
        ))
    }

    fn leave<'a>(&'a self, keys: &'a LockKeys, token: &'a str) -> BoxFuture<'a, ()> {
        Box::pin(leave_with(
            self.conn.clone(),
            keys,
            token,
            self.publish_command(),
        ))
    }

    fn release<'a>(
        &'a self,
        keys: &'a LockKeys,
        token: &'a str,
        keep: Duration,
    ) -> BoxFuture<'a, Result<Owned, LockError>> {
        Box::pin(release_with(
            self.conn.clone(),
            &self.server,
            &self.listening.waiters,
            (keys, token, keep),
            self.publish_command(),
        ))
    }

    fn renew<'a>(&'a self, batch: &'a [Renewal]) -> BoxFuture<'a, Result<Vec<Owned>, LockError>> {
        Box::pin(self.renew_by_slot(batch))
    }

    fn watch<'a>(&'a self, keys: &'a LockKeys) -> BoxFuture<'a, Result<(), LockError>> {
        Box::pin(
            self.listening
                .watch(&keys.channel, || self.start_listener()),
        )
    }

    fn unwatch(&self, keys: &LockKeys) {
        self.listening.unwatch(&keys.channel);
    }

    fn waiters(&self) -> &WaitList {
        &self.listening.waiters
    }

    fn describe(&self) -> String {
        self.server.clone()
    }
}
