//! The listener: how a Redis backend hears releases. One task per pub/sub
//! connection (started on a client's first wait) counts the waiters of each
//! release channel, subscribes for the first and unsubscribes after the last
//! (in order, so the two never cross), and turns announcements into local
//! wake-ups in the client's [`Wakeups`].

use std::collections::HashMap;
use std::sync::Arc;

use redis::{PushKind, RedisResult};
use tokio::sync::{OnceCell, mpsc, oneshot};

use super::BoxFuture;
use super::connect::backend_error;
use super::wakeups::{Announcement, Wakeups};
use crate::error::LockError;

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

/// What a Redis backend needs to hear releases: the client's wake-ups and
/// its listener task, started on the first wait.
pub(crate) struct Listener {
    pub(crate) wakeups: Arc<Wakeups>,
    task: OnceCell<Running>,
}

impl Listener {
    pub(crate) fn new(wakeups: Arc<Wakeups>) -> Listener {
        Listener {
            wakeups,
            task: OnceCell::new(),
        }
    }

    /// Resolves once releases of `channel` reach the wake-ups, starting the
    /// task with `start` if this is the first wait of the client.
    ///
    /// Cancel safety: the subscription is requested before the first await
    /// that can follow the start, so a caller dropped while waiting for the
    /// acknowledgement must still call [`unlisten`](Self::unlisten) (the
    /// waiter does, from `Drop`).
    pub(crate) async fn listen<F, Fut>(&self, channel: &str, start: F) -> Result<(), LockError>
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = Result<Running, LockError>>,
    {
        self.task
            .get_or_try_init(start)
            .await?
            .listen(channel)
            .await
    }

    pub(crate) fn unlisten(&self, channel: &str) {
        if let Some(task) = self.task.get() {
            task.unlisten(channel);
        }
    }
}

enum Op {
    /// One more waiter on this channel; the ack comes once messages flow.
    Subscribe(String, oneshot::Sender<Result<(), LockError>>),
    /// One waiter fewer on this channel.
    Unsubscribe(String),
}

/// The handle of a running listener task.
pub(crate) struct Running {
    ops: mpsc::UnboundedSender<Op>,
    server: String,
}

impl Running {
    /// Start the listener task on `conn`, whose push messages arrive on `pushes`.
    pub(crate) fn spawn<C: PubSubConnection>(
        conn: C,
        pushes: mpsc::UnboundedReceiver<redis::PushInfo>,
        server: String,
        wakeups: Arc<Wakeups>,
    ) -> Running {
        let (ops, ops_rx) = mpsc::unbounded_channel();
        let task = Task {
            conn,
            server: server.clone(),
            wakeups,
            refs: HashMap::new(),
        };
        tokio::spawn(task.run(ops_rx, pushes));
        Running { ops, server }
    }

    /// Resolves once messages of `channel` reach the wake-ups.
    async fn listen(&self, channel: &str) -> Result<(), LockError> {
        let (ack_tx, ack_rx) = oneshot::channel();
        self.ops
            .send(Op::Subscribe(channel.to_owned(), ack_tx))
            .map_err(|_| self.gone())?;
        ack_rx.await.map_err(|_| self.gone())?
    }

    fn unlisten(&self, channel: &str) {
        let _ = self.ops.send(Op::Unsubscribe(channel.to_owned()));
    }

    fn gone(&self) -> LockError {
        LockError::backend(&self.server, "the release listener stopped")
    }
}

struct Task<C> {
    conn: C,
    server: String,
    wakeups: Arc<Wakeups>,
    refs: HashMap<String, usize>,
}

impl<C: PubSubConnection> Task<C> {
    async fn run(
        mut self,
        mut ops: mpsc::UnboundedReceiver<Op>,
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

    async fn apply(&mut self, op: Op) {
        match op {
            Op::Subscribe(channel, ack) => {
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
            Op::Unsubscribe(channel) => {
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
                    self.wakeups.announce(channel, Announcement::parse(message));
                }
            }
            // Messages may have been lost while disconnected: let every waiter
            // look again rather than sleep until the holder's lease ends.
            PushKind::Disconnection => self.wakeups.wake_all(),
            _ => {}
        }
    }
}
