//! The listener: how a Redis backend hears releases. One task per pub/sub
//! connection (started on a client's first wait) counts the waiters of each
//! release channel, subscribes for the first and unsubscribes after the last
//! (in order, so the two never cross), and turns announcements into local
//! wake-ups in the client's [`Wakeups`].

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use redis::{PushKind, RedisResult};
use tokio::sync::{OnceCell, mpsc, oneshot};

use super::BoxFuture;
use super::connect::backend_error;
use super::wakeups::{Announcement, Wakeups};
use crate::error::LockError;
use crate::token::wakeups_name;

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
    /// The name of `wakeups` sent with this client's family places and
    /// releases ([`wakeups_name`]): a release handing a permit to a waiter
    /// of the same name tells it through its own reply, announced here,
    /// instead of `PUBLISH`.
    pub(crate) here: Option<Arc<str>>,
    task: OnceCell<Running>,
    /// Per channel, how many `listen` calls ended (failed or dropped)
    /// before their subscription was asked of the task: their `unlisten`
    /// must not take away a subscription that another waiter asked for.
    owed: Mutex<HashMap<String, usize>>,
}

impl Listener {
    pub(crate) fn new(wakeups: Arc<Wakeups>) -> Listener {
        Listener {
            wakeups,
            here: wakeups_name(),
            task: OnceCell::new(),
            owed: Mutex::default(),
        }
    }

    fn owed(&self) -> std::sync::MutexGuard<'_, HashMap<String, usize>> {
        // Every update is one map operation: a panic cannot tear it.
        self.owed.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Resolves once releases of `channel` reach the wake-ups, starting the
    /// task with `start` if this is the first wait of the client.
    ///
    /// Every call is matched by one [`unlisten`](Self::unlisten) (the
    /// waiter calls it from `Drop`), whatever its outcome. A call that ends
    /// before the subscription is asked of the task (the task could not
    /// start, or the caller was dropped while it started) leaves its
    /// `unlisten` owed nothing: that one then does not count against the
    /// channel's other waiters. Once asked, the subscription is counted
    /// even if the caller is dropped before the acknowledgement, or the
    /// `SUBSCRIBE` fails.
    pub(crate) async fn listen<F, Fut>(&self, channel: &str, start: F) -> Result<(), LockError>
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = Result<Running, LockError>>,
    {
        *self.owed().entry(channel.to_owned()).or_insert(0) += 1;
        let running = self.task.get_or_try_init(start).await?;
        if !self.settle(channel) {
            // A waiter of this channel left while the task started and
            // took our owed `unlisten` for its own, keeping its count:
            // give that back first.
            running.unlisten(channel);
        }
        // Asked on the first poll, with no await since `settle`.
        running.listen(channel).await
    }

    pub(crate) fn unlisten(&self, channel: &str) {
        if self.settle(channel) {
            return;
        }
        if let Some(task) = self.task.get() {
            task.unlisten(channel);
        }
    }

    /// Take back one owed `unlisten` of `channel`, if there is one.
    fn settle(&self, channel: &str) -> bool {
        let mut owed = self.owed();
        let Some(count) = owed.get_mut(channel) else {
            return false;
        };
        *count -= 1;
        if *count == 0 {
            owed.remove(channel);
        }
        true
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
    refs: HashMap<String, Channel>,
}

/// One release channel with waiters.
#[derive(Default)]
struct Channel {
    /// Subscriptions asked and not yet given back.
    waiters: usize,
    /// The `SUBSCRIBE` went through (a failed one is tried again for the
    /// next waiter).
    subscribed: bool,
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
                // Counted whatever the outcome: its waiter's unsubscribe
                // comes in any case, and must not take away another's.
                let entry = self.refs.entry(channel.clone()).or_default();
                entry.waiters += 1;
                let result = if entry.subscribed {
                    Ok(())
                } else {
                    let result = self.conn.subscribe(&channel).await;
                    if let Some(entry) = self.refs.get_mut(&channel) {
                        entry.subscribed = result.is_ok();
                    }
                    result.map_err(|e| backend_error(&self.server, e))
                };
                let _ = ack.send(result);
            }
            Op::Unsubscribe(channel) => {
                let Some(entry) = self.refs.get_mut(&channel) else {
                    return;
                };
                entry.waiters = entry.waiters.saturating_sub(1);
                if entry.waiters == 0 {
                    let subscribed = entry.subscribed;
                    self.refs.remove(&channel);
                    if subscribed && let Err(e) = self.conn.unsubscribe(&channel).await {
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
