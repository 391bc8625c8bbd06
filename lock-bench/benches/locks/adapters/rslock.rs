//! `rslock`: Redlock (also on one node). Used as its README shows:
//! `LockManager::new(uris)`, `lock` for one attempt (its default 3 tries),
//! `acquire` to wait (loops over `lock`: default retry settings, random
//! 0–200 ms between tries), `release().await`, and `using` for a lease kept
//! alive while a routine runs (its only renewal mechanism: one timer per lock).

use std::time::Duration;

use rslock::{Lock, LockManager};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use super::settings::{Res, Settings};

pub struct Rslock {
    manager: LockManager,
    settings: Settings,
}

/// A held rslock lock: a plain lock, or a `using` routine that keeps it alive.
pub enum Held {
    Lock(Lock),
    Using {
        stop: oneshot::Sender<()>,
        task: JoinHandle<Result<(), rslock::LockError>>,
    },
}

impl Held {
    pub fn client_says_held(&self) -> Option<bool> {
        match self {
            // rslock keeps no local lease state (validity_time is fixed at acquisition).
            Held::Lock(_) => None,
            // `using` ends (releasing) when renewal fails.
            Held::Using { task, .. } => Some(!task.is_finished()),
        }
    }
}

impl Rslock {
    pub fn connect(urls: &[String], settings: Settings) -> Res<Rslock> {
        let clients = urls
            .iter()
            .map(|u| redis::Client::open(u.as_str()))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Rslock {
            manager: LockManager::from_clients(clients),
            settings,
        })
    }

    pub async fn acquire(&self, key: &str) -> Res<Held> {
        if self.settings.renew {
            return self.acquire_using(key).await;
        }
        Ok(Held::Lock(
            self.manager.lock(key.as_bytes(), self.settings.ttl).await?,
        ))
    }

    pub async fn acquire_wait(&self, key: &str, max: Duration) -> Res<Option<Held>> {
        match tokio::time::timeout(max, self.manager.acquire(key.as_bytes(), self.settings.ttl))
            .await
        {
            Ok(guard) => Ok(Some(Held::Lock(guard?.lock))),
            Err(_) => Ok(None),
        }
    }

    /// `LockManager::using` in a task, with a routine that runs until told to stop.
    async fn acquire_using(&self, key: &str) -> Res<Held> {
        let (acquired_tx, acquired_rx) = oneshot::channel::<()>();
        let (stop, stop_rx) = oneshot::channel::<()>();
        let manager = self.manager.clone();
        let resource = key.as_bytes().to_vec();
        let ttl = self.settings.ttl;
        let task = tokio::spawn(async move {
            manager
                .using(&resource, ttl, async move || {
                    let _ = acquired_tx.send(());
                    let _ = stop_rx.await;
                })
                .await
        });
        if acquired_rx.await.is_err() {
            return match task.await {
                Ok(Err(e)) => Err(e.into()),
                Ok(Ok(())) => Err("rslock: using ended before acquiring".into()),
                Err(e) => Err(e.into()),
            };
        }
        Ok(Held::Using { stop, task })
    }

    pub async fn release(&self, held: Held) -> Res<()> {
        match held {
            Held::Lock(lock) => {
                // Best effort by design: rslock reports nothing.
                lock.release().await;
                Ok(())
            }
            Held::Using { stop, task } => {
                let _ = stop.send(());
                task.await??;
                Ok(())
            }
        }
    }
}
