//! The fault kit's backend ([`crate::testing`]): an in-memory store of its
//! own, wrapped so that a test can make it slow, unavailable or restarted,
//! and take a lease away from its holder (stolen, expired).
//!
//! Every delay is a `tokio::time::sleep`, so it honours a paused clock.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use super::memory::MemoryBackend;
use super::wakeups::Wakeups;
use super::{
    Acquired, Attempt, Backend, BoxFuture, LockKeys, Owned, Release, Renewal, Reply, ServerChange,
};
use crate::error::{LockError, LostCause};

/// How the backend names itself in errors.
pub(crate) const DESCRIPTION: &str = "faulty in-memory (leasehold::testing)";

/// The faults in force.
#[derive(Debug, Default, Clone, Copy)]
struct Faults {
    unavailable: bool,
    delay: Duration,
}

/// The restart gate, as a real client keeps it (see `redis/gate.rs`): per
/// key, the longest lease asked for that could still run; after a restart,
/// each such key is closed until that lease could have run out.
#[derive(Debug, Default)]
struct Gate {
    /// Per key (as given): the longest lease asked for, and when.
    asks: HashMap<String, (Duration, Instant)>,
    /// Per key: closed until then.
    closed: HashMap<String, Instant>,
}

/// An isolated in-memory store behind injectable faults.
pub(crate) struct FaultyBackend {
    store: Arc<MemoryBackend>,
    faults: Mutex<Faults>,
    gate: Mutex<Gate>,
    changes: watch::Sender<ServerChange>,
    calls: AtomicU64,
}

impl FaultyBackend {
    pub(crate) fn new() -> FaultyBackend {
        FaultyBackend {
            store: MemoryBackend::isolated(),
            faults: Mutex::default(),
            gate: Mutex::default(),
            changes: watch::Sender::new(ServerChange::default()),
            calls: AtomicU64::new(0),
        }
    }

    fn faults(&self) -> MutexGuard<'_, Faults> {
        // Every update is a single field write.
        self.faults.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn set_unavailable(&self, on: bool) {
        self.faults().unavailable = on;
    }

    pub(crate) fn set_delay(&self, delay: Duration) {
        self.faults().delay = delay;
    }

    pub(crate) fn calls(&self) -> u64 {
        self.calls.load(Ordering::Relaxed)
    }

    pub(crate) fn store(&self) -> &MemoryBackend {
        &self.store
    }

    fn gate(&self) -> MutexGuard<'_, Gate> {
        // Every update is a map insert or removal.
        self.gate.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Before an attempt on `key` with a lease of `ttl`: remember the ask,
    /// and refuse it while the key is closed after a restart, as a real
    /// client does (`LockError::Unavailable` with the time left).
    fn admit(&self, key: &str, ttl: Duration) -> Result<(), LockError> {
        let now = Instant::now();
        let mut gate = self.gate();
        let ask = gate.asks.entry(key.to_owned()).or_insert((ttl, now));
        if ask.0 <= ttl || ask.1 + ask.0 <= now {
            *ask = (ttl, now);
        }
        match gate.closed.get(key) {
            Some(&until) if until > now => Err(LockError::Unavailable {
                key: Some(key.to_owned()),
                server: DESCRIPTION.to_owned(),
                reason: "it restarted (fault injected by FaultControls::restart) and may have \
                         lost a lease of this key that another client still relies on"
                    .to_owned(),
                retry_after: Some(until - now),
            }),
            Some(_) => {
                gate.closed.remove(key);
                Ok(())
            }
            None => Ok(()),
        }
    }

    /// The store forgets everything and says so, as a server restarted
    /// without persistence: every held lease is checked at once, and every
    /// key asked for within its lease before it is closed until that lease
    /// could have run out.
    pub(crate) fn restart(&self) {
        let now = Instant::now();
        {
            let mut gate = self.gate();
            let Gate { asks, closed } = &mut *gate;
            asks.retain(|_, (ttl, at)| *at + *ttl > now);
            for (key, (ttl, _)) in asks.iter() {
                let until = now + *ttl;
                let entry = closed.entry(key.clone()).or_insert(until);
                *entry = (*entry).max(until);
            }
        }
        self.store.clear();
        self.changes.send_modify(|change| {
            change.generation += 1;
            change.cause = LostCause::Restarted;
        });
        self.store.wakeups().wake_all();
    }

    /// What every call goes through first: the delay, then the outage.
    async fn enter(&self) -> Result<(), LockError> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        let delay = self.faults().delay;
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        if self.faults().unavailable {
            return Err(LockError::Backend {
                server: DESCRIPTION.to_owned(),
                key: None,
                message: "unavailable (fault injected by FaultControls::set_unavailable)"
                    .to_owned(),
            });
        }
        Ok(())
    }
}

impl Backend for FaultyBackend {
    fn acquire<'a>(&'a self, attempt: Attempt<'a>) -> Reply<'a, Acquired> {
        Box::pin(async move {
            self.enter().await?;
            self.admit(attempt.keys.key(), attempt.ttl)?;
            self.store.acquire(attempt).await
        })
    }

    fn abandon<'a>(&'a self, keys: &'a LockKeys, token: &'a str) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            // Unreachable: the traces lapse by themselves, as on Redis.
            if self.enter().await.is_ok() {
                self.store.abandon(keys, token).await;
            }
        })
    }

    fn release<'a>(&'a self, release: Release<'a>) -> Reply<'a, Owned> {
        Box::pin(async move {
            self.enter().await?;
            self.store.release(release).await
        })
    }

    fn renew<'a>(&'a self, batch: &'a [Renewal]) -> Reply<'a, Vec<Owned>> {
        Box::pin(async move {
            self.enter().await?;
            self.store.renew(batch).await
        })
    }

    fn listen<'a>(&'a self, keys: &'a LockKeys) -> Reply<'a, ()> {
        Box::pin(async move {
            self.enter().await?;
            self.store.listen(keys).await
        })
    }

    fn unlisten(&self, keys: &LockKeys) {
        self.store.unlisten(keys);
    }

    fn sync_replicas<'a>(
        &'a self,
        keys: &'a LockKeys,
        replicas: usize,
        timeout: Duration,
    ) -> Reply<'a, usize> {
        Box::pin(async move {
            self.enter().await?;
            self.store.sync_replicas(keys, replicas, timeout).await
        })
    }

    fn wakeups(&self) -> &Wakeups {
        self.store.wakeups()
    }

    fn changes(&self) -> Option<watch::Receiver<ServerChange>> {
        Some(self.changes.subscribe())
    }

    fn drift(&self, ttl: Duration) -> Duration {
        self.store.drift(ttl)
    }

    fn place_life(&self) -> Duration {
        self.store.place_life()
    }

    fn describe(&self) -> String {
        DESCRIPTION.to_owned()
    }
}
