//! What wakes an election's watcher: the announcements on the election's
//! channel, and the backend's restarts and failovers.

use std::sync::Arc;

use tokio::sync::{Notify, watch};

use crate::backend::{Backend, LockKeys, ServerChange};

/// A watcher's hold on the election's announcements: registered as an
/// observer of its channel, and subscribed to it; both undone on drop.
pub(super) struct Observing {
    backend: Arc<dyn Backend>,
    keys: LockKeys,
    wake: Arc<Notify>,
    /// A `listen` was asked (matched by `unlisten` on drop).
    listening: bool,
}

impl Observing {
    pub(super) fn start(backend: Arc<dyn Backend>, keys: LockKeys, wake: Arc<Notify>) -> Observing {
        backend.wakeups().observe(keys.channel(), wake.clone());
        Observing {
            backend,
            keys,
            wake,
            listening: false,
        }
    }

    /// Subscribe, unless already: announcements from other processes then
    /// reach the observer. Without it, the watcher still wakes at the
    /// lease's end and on this process's own changes; it tries again at
    /// its next wake.
    pub(super) async fn listen(&mut self) {
        if self.listening {
            return;
        }
        // Before the await: dropped meanwhile, `drop` matches it.
        self.listening = true;
        if let Err(error) = self.backend.listen(&self.keys).await {
            tracing::debug!(%error, "leasehold: the election's watcher hears no announcements yet");
            self.backend.unlisten(&self.keys);
            self.listening = false;
        }
    }
}

impl Drop for Observing {
    fn drop(&mut self) {
        (self.backend.wakeups()).unobserve(self.keys.channel(), &self.wake);
        if self.listening {
            self.backend.unlisten(&self.keys);
        }
    }
}

/// Resolves when the backend announces a restart or failover (never, for a
/// backend that has none, or once its announcements end).
pub(super) async fn server_changed(changes: &mut Option<watch::Receiver<ServerChange>>) {
    match changes {
        Some(receiver) => {
            if receiver.changed().await.is_err() {
                *changes = None;
                std::future::pending::<()>().await;
            }
        }
        None => std::future::pending::<()>().await,
    }
}
