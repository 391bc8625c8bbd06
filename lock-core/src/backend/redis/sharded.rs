//! Release announcements on Redis Cluster: sharded pub/sub (`SSUBSCRIBE`,
//! Redis ≥ 7) or plain pub/sub on older servers, for the listener.
//!
//! When a slot moves, its old owner drops the sharded subscriptions of that
//! slot (a server-sent `SUNSUBSCRIBE`). The listener wants them still, so
//! [`follow_moved_subscriptions`] subscribes again (the cluster connection
//! follows the `MOVED` to the new owner) and wakes that lock's first waiter,
//! which may have missed a release in between.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use redis::cluster_async::ClusterConnection;
use redis::{PushInfo, PushKind, RedisResult, Value};
use tokio::sync::mpsc;

use crate::backend::BoxFuture;
use crate::backend::listener::PubSubConnection;
use crate::backend::wakeups::Wakeups;

/// The release channels the listener wants to be subscribed to.
pub(super) type Wanted = Arc<Mutex<HashSet<String>>>;

fn lock_wanted(wanted: &Wanted) -> MutexGuard<'_, HashSet<String>> {
    // Every update is a single insert or remove.
    wanted.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The listener's connection: sharded pub/sub where the servers have it.
pub(super) struct ClusterPubSub {
    conn: ClusterConnection,
    sharded: bool,
    wanted: Wanted,
}

impl ClusterPubSub {
    pub(super) fn new(conn: ClusterConnection, sharded: bool, wanted: Wanted) -> ClusterPubSub {
        ClusterPubSub {
            conn,
            sharded,
            wanted,
        }
    }
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
pub(super) async fn forward(
    mut from: mpsc::UnboundedReceiver<PushInfo>,
    to: mpsc::UnboundedSender<PushInfo>,
) {
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
pub(super) async fn follow_moved_subscriptions(
    mut from: mpsc::UnboundedReceiver<PushInfo>,
    to: mpsc::UnboundedSender<PushInfo>,
    mut conn: ClusterConnection,
    wanted: Wanted,
    wakeups: Arc<Wakeups>,
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
            wakeups.wake_first(&channel);
        }
        if to.send(push).is_err() {
            return;
        }
    }
}
