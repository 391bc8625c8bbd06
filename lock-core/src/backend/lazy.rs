//! A lazy start (`LockClientBuilder::lazy(true)`): the client exists before
//! its server answers. A task connects in the background, retrying with a
//! growing pause, and every call before it succeeds fails at once with an
//! unavailable-class error (or, once the server answered with a setup
//! mistake such as a wrong password, with that error). A service can start
//! and answer 503 while Redis is down, instead of crash-looping.
//!
//! Once connected, every call goes to the real backend; the checks of the
//! gate (eviction policy, restart grace) ran as part of that connection.

use std::sync::{Arc, Mutex, OnceLock, PoisonError, Weak};
use std::time::Duration;

use tokio::sync::watch;

use super::target::Target;
use super::wakeups::Wakeups;
use super::{
    Acquired, Attempt, Backend, BoxFuture, Inspected, LockKeys, Owned, Release, Renewal, Reply,
    ServerChange,
};
use crate::config::{ConnectSettings, GateSettings};
use crate::error::LockError;

/// The first pause between two connection attempts; it doubles up to
/// [`MAX_RETRY_DELAY`].
const FIRST_RETRY_DELAY: Duration = Duration::from_millis(50);
const MAX_RETRY_DELAY: Duration = Duration::from_secs(2);

pub(crate) struct LazyBackend {
    /// The target, credentials redacted.
    shown: String,
    connected: OnceLock<Arc<dyn Backend>>,
    /// Why the last connection attempt failed.
    last_error: Mutex<Option<LockError>>,
    /// Waiters register here only after a busy reply, which needs a
    /// connection: this one stays empty; it stands in until then.
    idle_wakeups: Wakeups,
    /// The connected backend's announcements of server changes, passed on
    /// (the watchdog subscribes when the client is made).
    changes: watch::Sender<ServerChange>,
    /// The client's place life (the connected backend has the same).
    place_life: Duration,
}

/// The backend of `target`: connected and checked now, or (`lazy`)
/// connecting in the background, every call before it answers an
/// unavailable-class error.
pub(crate) async fn start(
    target: Target,
    settings: &ConnectSettings,
    gate_settings: GateSettings,
    lazy: bool,
) -> Result<Arc<dyn Backend>, LockError> {
    if lazy {
        let started: Arc<dyn Backend> =
            LazyBackend::start(target, settings.clone(), gate_settings)?;
        return Ok(started);
    }
    target.open(settings, gate_settings).await
}

impl LazyBackend {
    /// Start connecting to `target` in the background (its URLs were
    /// checked). Needs a tokio runtime.
    pub(crate) fn start(
        target: Target,
        settings: ConnectSettings,
        gate_settings: GateSettings,
    ) -> Result<Arc<LazyBackend>, LockError> {
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| {
            LockError::invalid(
                "runtime",
                "leasehold needs a tokio runtime: connect from within one",
            )
        })?;
        let lazy = Arc::new(LazyBackend {
            shown: target.describe(),
            connected: OnceLock::new(),
            last_error: Mutex::new(None),
            idle_wakeups: Wakeups::default(),
            changes: watch::channel(ServerChange::default()).0,
            place_life: gate_settings.place_life,
        });
        runtime.spawn(connect_in_background(
            Arc::downgrade(&lazy),
            target,
            settings,
            gate_settings,
        ));
        Ok(lazy)
    }

    /// The connected backend, or the error every call gets until then.
    fn backend(&self) -> Result<&Arc<dyn Backend>, LockError> {
        if let Some(backend) = self.connected.get() {
            return Ok(backend);
        }
        let last = self
            .last_error
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        Err(match last {
            // The server answered with a setup mistake: say that.
            Some(error) if !error.is_unavailable() => error,
            last => LockError::Unavailable {
                key: None,
                server: self.shown.clone(),
                reason: match last {
                    Some(error) => format!("not connected yet (lazy start; last try: {error})"),
                    None => "not connected yet (lazy start)".to_owned(),
                },
                retry_after: None,
            },
        })
    }
}

/// Connect until it works or the client is gone; then pass the backend's
/// server changes on.
async fn connect_in_background(
    lazy: Weak<LazyBackend>,
    target: Target,
    settings: ConnectSettings,
    gate_settings: GateSettings,
) {
    let mut delay = FIRST_RETRY_DELAY;
    let backend = loop {
        let opened = target.open(&settings, gate_settings).await;
        let Some(lazy) = lazy.upgrade() else {
            return;
        };
        match opened {
            Ok(backend) => break backend,
            Err(error) => {
                tracing::debug!(%error, target = %lazy.shown, "leasehold: lazy start, not connected yet");
                *lazy
                    .last_error
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner) = Some(error);
            }
        }
        drop(lazy);
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(MAX_RETRY_DELAY);
    };
    let changes = backend.changes();
    {
        let Some(lazy) = lazy.upgrade() else {
            return;
        };
        tracing::info!(target = %lazy.shown, "leasehold: connected (lazy start)");
        if lazy.connected.set(backend).is_err() {
            return;
        }
    }
    let Some(mut changes) = changes else {
        return;
    };
    while changes.changed().await.is_ok() {
        let change = *changes.borrow_and_update();
        let Some(lazy) = lazy.upgrade() else {
            return;
        };
        lazy.changes.send_replace(change);
    }
}

fn refused<'a, T: Send + 'a>(error: LockError) -> Reply<'a, T> {
    Box::pin(async move { Err(error) })
}

impl Backend for LazyBackend {
    fn acquire<'a>(&'a self, attempt: Attempt<'a>) -> Reply<'a, Acquired> {
        match self.backend() {
            Ok(backend) => backend.acquire(attempt),
            Err(error) => refused(error.with_key(attempt.keys.key())),
        }
    }

    fn abandon<'a>(&'a self, keys: &'a LockKeys, token: &'a str) -> BoxFuture<'a, ()> {
        match self.backend() {
            Ok(backend) => backend.abandon(keys, token),
            Err(_) => Box::pin(async {}),
        }
    }

    fn keep_place<'a>(&'a self, keys: &'a LockKeys, token: &'a str) -> Reply<'a, Option<Duration>> {
        match self.backend() {
            Ok(backend) => backend.keep_place(keys, token),
            Err(error) => refused(error.with_key(keys.key())),
        }
    }

    fn stand_in_line(&self, keys: &LockKeys, ttl: Duration, stands: bool) {
        if let Ok(backend) = self.backend() {
            backend.stand_in_line(keys, ttl, stands);
        }
    }

    fn keeps_places(&self) -> bool {
        // Until connected, assume a line: a keep-alive then fails cheaply.
        self.backend()
            .map_or(true, |backend| backend.keeps_places())
    }

    fn admit_grant<'a>(&'a self, keys: &'a LockKeys, ttl: Duration) -> Reply<'a, ()> {
        match self.backend() {
            Ok(backend) => backend.admit_grant(keys, ttl),
            Err(error) => refused(error.with_key(keys.key())),
        }
    }

    fn release<'a>(&'a self, release: Release<'a>) -> Reply<'a, Owned> {
        match self.backend() {
            Ok(backend) => backend.release(release),
            Err(error) => refused(error.with_key(release.keys.key())),
        }
    }

    fn renew<'a>(&'a self, batch: &'a [Renewal]) -> Reply<'a, Vec<Owned>> {
        match self.backend() {
            Ok(backend) => backend.renew(batch),
            Err(error) => refused(error),
        }
    }

    fn listen<'a>(&'a self, keys: &'a LockKeys) -> Reply<'a, ()> {
        match self.backend() {
            Ok(backend) => backend.listen(keys),
            Err(error) => refused(error.with_key(keys.key())),
        }
    }

    fn unlisten(&self, keys: &LockKeys) {
        if let Ok(backend) = self.backend() {
            backend.unlisten(keys);
        }
    }

    fn sync_replicas<'a>(
        &'a self,
        keys: &'a LockKeys,
        replicas: usize,
        timeout: Duration,
    ) -> Reply<'a, usize> {
        match self.backend() {
            Ok(backend) => backend.sync_replicas(keys, replicas, timeout),
            Err(error) => refused(error.with_key(keys.key())),
        }
    }

    fn inspect<'a>(&'a self, keys: &'a LockKeys) -> Reply<'a, Option<Inspected>> {
        match self.backend() {
            Ok(backend) => backend.inspect(keys),
            Err(error) => refused(error.with_key(keys.key())),
        }
    }

    fn list<'a>(&'a self, prefix: &'a str, pattern: &'a str) -> Reply<'a, Vec<Inspected>> {
        match self.backend() {
            Ok(backend) => backend.list(prefix, pattern),
            Err(error) => refused(error),
        }
    }

    fn force_release<'a>(&'a self, keys: &'a LockKeys) -> Reply<'a, bool> {
        match self.backend() {
            Ok(backend) => backend.force_release(keys),
            Err(error) => refused(error.with_key(keys.key())),
        }
    }

    fn wakeups(&self) -> &Wakeups {
        match self.connected.get() {
            Some(backend) => backend.wakeups(),
            None => &self.idle_wakeups,
        }
    }

    fn busy_leaves_traces(&self) -> bool {
        self.connected
            .get()
            .is_some_and(|backend| backend.busy_leaves_traces())
    }

    fn records_lazily(&self) -> bool {
        self.connected
            .get()
            .is_some_and(|backend| backend.records_lazily())
    }

    fn changes(&self) -> Option<watch::Receiver<ServerChange>> {
        Some(self.changes.subscribe())
    }

    fn drift(&self, ttl: Duration) -> Duration {
        match self.connected.get() {
            Some(backend) => backend.drift(ttl),
            None => super::default_drift(ttl),
        }
    }

    fn place_life(&self) -> Duration {
        self.place_life
    }

    fn describe(&self) -> String {
        match self.connected.get() {
            Some(backend) => backend.describe(),
            None => self.shown.clone(),
        }
    }
}
