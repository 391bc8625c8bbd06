//! The release listener shared by the Redis backends: one task per
//! subscriber connection counts waiters per channel, subscribes on the first
//! and unsubscribes after the last (in order, so the two never cross), and
//! turns messages into local wake-ups in a [`WaitList`].

use std::collections::HashMap;
use std::sync::Arc;

use redis::{PushKind, RedisResult};
use tokio::sync::{OnceCell, mpsc, oneshot};

use super::BoxFuture;
use super::redis::backend_error;
use crate::error::LockError;
use crate::waiting::{Announcement, WaitList};

/// A connection that can (un)subscribe to release channels and delivers
/// messages to a push sender: plain pub/sub on one server, sharded pub/sub
/// on Redis Cluster.
pub(crate) trait PubSubConnection: Send + 'static {
    fn subscribe<'a>(&'a mut self, channel: &'a str) -> BoxFuture<'a, RedisResult<()>>;
    fn unsubscribe<'a>(&'a mut self, channel: &'a str) -> BoxFuture<'a, RedisResult<()>>;
}

impl PubSubConnection for redis::aio::ConnectionManager {
    fn subscribe<'a>(&'a mut self, channel: &'a str) -> BoxFuture<'a, RedisResult<()>> {
        Box::pin(redis::aio::ConnectionManager::subscribe(self, channel))
    }

    fn unsubscribe<'a>(&'a mut self, channel: &'a str) -> BoxFuture<'a, RedisResult<()>> {
        Box::pin(redis::aio::ConnectionManager::unsubscribe(self, channel))
    }
}

/// What a Redis backend needs to hear releases: the client's wait list and
/// its listener, started on the first wait.
pub(crate) struct Listening {
    pub(crate) waiters: Arc<WaitList>,
    subscriber: OnceCell<Subscriber>,
}

impl Listening {
    pub(crate) fn new(waiters: Arc<WaitList>) -> Listening {
        Listening {
            waiters,
            subscriber: OnceCell::new(),
        }
    }

    /// Resolves once releases of `channel` reach the wait list, starting the
    /// listener with `start` if this is the first wait of the client.
    pub(crate) async fn watch<F, Fut>(&self, channel: &str, start: F) -> Result<(), LockError>
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = Result<Subscriber, LockError>>,
    {
        self.subscriber
            .get_or_try_init(start)
            .await?
            .watch(channel)
            .await
    }

    pub(crate) fn unwatch(&self, channel: &str) {
        if let Some(subscriber) = self.subscriber.get() {
            subscriber.unwatch(channel);
        }
    }
}

pub(crate) enum SubscriberOp {
    /// One more waiter on this channel; the ack comes once messages flow.
    Subscribe(String, oneshot::Sender<Result<(), LockError>>),
    /// One waiter fewer on this channel.
    Unsubscribe(String),
}

/// The handle of a running listener.
pub(crate) struct Subscriber {
    ops: mpsc::UnboundedSender<SubscriberOp>,
    server: String,
}

impl Subscriber {
    /// Start the listener task on `conn`, whose push messages arrive on `pushes`.
    pub(crate) fn spawn<C: PubSubConnection>(
        conn: C,
        pushes: mpsc::UnboundedReceiver<redis::PushInfo>,
        server: String,
        waiters: Arc<WaitList>,
    ) -> Subscriber {
        let (ops, ops_rx) = mpsc::unbounded_channel();
        let listener = Listener {
            conn,
            server: server.clone(),
            waiters,
            refs: HashMap::new(),
        };
        tokio::spawn(listener.run(ops_rx, pushes));
        Subscriber { ops, server }
    }

    /// Resolves once messages of `channel` reach the wait list.
    pub(crate) async fn watch(&self, channel: &str) -> Result<(), LockError> {
        let (ack_tx, ack_rx) = oneshot::channel();
        self.ops
            .send(SubscriberOp::Subscribe(channel.to_owned(), ack_tx))
            .map_err(|_| self.gone())?;
        ack_rx.await.map_err(|_| self.gone())?
    }

    pub(crate) fn unwatch(&self, channel: &str) {
        let _ = self.ops.send(SubscriberOp::Unsubscribe(channel.to_owned()));
    }

    fn gone(&self) -> LockError {
        LockError::backend(&self.server, "the release listener stopped")
    }
}

struct Listener<C> {
    conn: C,
    server: String,
    waiters: Arc<WaitList>,
    refs: HashMap<String, usize>,
}

impl<C: PubSubConnection> Listener<C> {
    async fn run(
        mut self,
        mut ops: mpsc::UnboundedReceiver<SubscriberOp>,
        mut pushes: mpsc::UnboundedReceiver<redis::PushInfo>,
    ) {
        loop {
            tokio::select! {
                op = ops.recv() => match op {
                    Some(op) => self.apply(op).await,
                    // The backend (and so every waiter) is gone.
                    None => return,
                },
                Some(push) = pushes.recv() => self.dispatch(push),
            }
        }
    }

    async fn apply(&mut self, op: SubscriberOp) {
        match op {
            SubscriberOp::Subscribe(channel, ack) => {
                let count = self.refs.entry(channel.clone()).or_insert(0);
                *count += 1;
                let result = if *count == 1 {
                    let result = self.conn.subscribe(&channel).await;
                    if result.is_err() {
                        self.refs.remove(&channel);
                    }
                    result.map_err(|e| backend_error(&self.server, e))
                } else {
                    Ok(())
                };
                let _ = ack.send(result);
            }
            SubscriberOp::Unsubscribe(channel) => {
                let Some(count) = self.refs.get_mut(&channel) else {
                    return;
                };
                *count -= 1;
                if *count == 0 {
                    self.refs.remove(&channel);
                    if let Err(e) = self.conn.unsubscribe(&channel).await {
                        tracing::debug!(channel, error = %e, "leasehold: unsubscribe failed");
                    }
                }
            }
        }
    }

    fn dispatch(&self, push: redis::PushInfo) {
        match push.kind {
            PushKind::Message | PushKind::SMessage => {
                // [channel, payload]: `next:<token>` or `free:<token>`.
                let text = |i: usize| match push.data.get(i) {
                    Some(redis::Value::BulkString(bytes)) => std::str::from_utf8(bytes).ok(),
                    _ => None,
                };
                if let (Some(channel), Some(message)) = (text(0), text(1)) {
                    self.waiters.announce(channel, Announcement::parse(message));
                }
            }
            // Messages may have been lost while disconnected: let every waiter
            // look again rather than sleep until the holder's lease ends.
            PushKind::Disconnection => self.waiters.notify_all(),
            _ => {}
        }
    }
}
