//! Redis Sentinel: the primary of a monitored set, discovered through the
//! sentinels and followed across failovers.
//!
//! - **Discovery.** `SENTINEL get-master-addr-by-name` is asked of each
//!   sentinel in turn; the first answer wins, and the server named must say
//!   `ROLE` master before it is used.
//! - **Following.** A task re-resolves the primary when the command
//!   connection breaks, when a command is answered `READONLY` (the old
//!   primary came back as a replica), when any sentinel announces
//!   `+switch-master` for this set (pub/sub on every sentinel), and every few
//!   seconds as a safety net. Until the sentinels name a new primary it keeps
//!   asking, with a short backoff.
//! - **Switching.** The new primary's identity is read, the command
//!   connection swapped, then the [`Gate`] told: its `run_id` differs, so
//!   grants close (for the longest lease issued, and `restart_grace`) and
//!   every held lease is checked at once, those whose key is not on the new
//!   primary reported lost with [`LostCause::FailedOver`]. The release
//!   listener moves to the new primary (resubscribing its channels) and every
//!   waiter is woken to look again.
//! - **Connecting after a failover.** With `restart_grace`, a client asks
//!   the sentinels how long the primary has been primary
//!   (`role-reported-time` of `SENTINEL MASTER`) and grants nothing until
//!   the grace has passed since then: a promoted replica's uptime says
//!   nothing about its promotion, and this client did not see it.
//!
//! [`LostCause::FailedOver`]: crate::error::LostCause::FailedOver
//!
//! Credentials: a sentinel URL's user and password are the sentinel's; the
//! primary is reached with the same ones unless the URL's query gives
//! `primary_password` (and `primary_username`), e.g.
//! `redis://:sentinel-pw@s1:26379?primary_password=pw`; an empty
//! `primary_password=` means none. A path (`/2`) selects the primary's
//! database. These are taken from the first sentinel URL.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, PoisonError, RwLock, Weak};
use std::time::Duration;

use futures_util::StreamExt;
use redis::aio::{ConnectionLike, ConnectionManager};
use redis::{Cmd, PushKind, RedisError, RedisFuture, Value};
use tokio::sync::{Notify, mpsc, watch};

mod discovery;

use discovery::{PrimaryTemplate, is_primary, open_primary, parse_sentinels, primary_age, resolve};

use super::gate::Gate;
use super::{RedisBackend, Topology};
use crate::backend::BoxFuture;
use crate::backend::connect::{Address, backend_error, connect_manager, shown_all};
use crate::backend::listener::{PubSubConnection, Running};
use crate::backend::scripts;
use crate::backend::wakeups::Wakeups;
use crate::config::{ConnectSettings, GateSettings};
use crate::error::LockError;

/// The channel on which sentinels announce a new primary.
const SWITCH_MASTER: &str = "+switch-master";
/// How often the primary is looked up even when nothing suggests a change.
const SAFETY_NET: Duration = Duration::from_secs(5);
/// The longest pause between two lookups while the primary is unreachable.
const MAX_RESOLVE_DELAY: Duration = Duration::from_millis(500);
/// The pause before reconnecting to a sentinel for its announcements.
const SENTINEL_RECONNECT: Duration = Duration::from_secs(1);

/// The Sentinel topology: commands go to the current primary.
pub(crate) struct Sentinel {
    shared: Arc<Shared>,
}

/// The Sentinel backend.
pub(crate) type SentinelBackend = RedisBackend<Sentinel>;

struct Shared {
    master_name: String,
    sentinels: Vec<Address>,
    template: PrimaryTemplate,
    settings: ConnectSettings,
    /// How messages show this set: its name and sentinels, redacted.
    shown: String,
    current: RwLock<Current>,
    /// Asks the follower task to look the primary up now.
    kick: Arc<Notify>,
    /// The command connections' pushes (disconnections) go here.
    pushes: mpsc::UnboundedSender<redis::PushInfo>,
    /// The release listener's connection, once a client waited.
    pubsub: Mutex<Option<Arc<PubSub>>>,
    /// Dropped with the backend: ends the sentinel listeners.
    _alive: watch::Sender<()>,
}

struct Current {
    address: Address,
    conn: ConnectionManager,
}

impl Sentinel {
    /// Find the primary of `master_name` through `sentinels` (as checked
    /// by `Target::check`), connect and check it, and start following it.
    pub(crate) async fn connect(
        master_name: &str,
        sentinel_urls: &[String],
        settings: &ConnectSettings,
        gate_settings: GateSettings,
    ) -> Result<SentinelBackend, LockError> {
        let (sentinels, template) = parse_sentinels(sentinel_urls)?;
        let shown = format!(
            "sentinel `{master_name}` via {}",
            shown_all(&sentinels, ",")
        );
        let gate = Arc::new(Gate::new(&shown, gate_settings));
        let wakeups: Arc<Wakeups> = Arc::default();
        let (pushes, pushes_rx) = mpsc::unbounded_channel();

        let address = resolve(master_name, &sentinels, &template, settings, &shown).await?;
        let mut conn = open_primary(&address, settings, pushes.clone()).await?;
        gate.check(&mut conn, true).await?;
        if gate.has_restart_grace()
            && let Some(age) =
                primary_age(master_name, &sentinels, &template, &address, settings).await
        {
            gate.primary_for(age);
        }
        scripts::preload(&mut conn, &shown).await?;

        let (alive, alive_rx) = watch::channel(());
        let shared = Arc::new(Shared {
            master_name: master_name.to_owned(),
            sentinels,
            template,
            settings: settings.clone(),
            shown: shown.clone(),
            current: RwLock::new(Current { address, conn }),
            kick: Arc::new(Notify::new()),
            pushes,
            pubsub: Mutex::new(None),
            _alive: alive,
        });
        let switches_rx = shared.hear_switches(alive_rx)?;
        tokio::spawn(follow(
            Arc::downgrade(&shared),
            Arc::downgrade(&gate),
            Arc::downgrade(&wakeups),
            shared.kick.clone(),
            pushes_rx,
            switches_rx,
        ));
        Ok(RedisBackend::new(Sentinel { shared }, shown, wakeups, gate))
    }
}

impl Shared {
    /// Listen to every sentinel's `+switch-master` announcements for this
    /// set, until `alive` is dropped; the switches arrive on the receiver.
    fn hear_switches(
        &self,
        alive: watch::Receiver<()>,
    ) -> Result<mpsc::UnboundedReceiver<()>, LockError> {
        let (switches_tx, switches_rx) = mpsc::unbounded_channel();
        for sentinel in &self.sentinels {
            tokio::spawn(hear_switches(
                sentinel.clone(),
                sentinel.client(&self.settings)?,
                self.master_name.clone(),
                switches_tx.clone(),
                alive.clone(),
            ));
        }
        Ok(switches_rx)
    }

    fn current(&self) -> std::sync::RwLockReadGuard<'_, Current> {
        self.current.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn pubsub(&self) -> Option<Arc<PubSub>> {
        self.pubsub
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Look the primary up and follow it if it moved. `Ok` once settled:
    /// the primary answers (and its identity was read again). With no
    /// sentinel answering, the known primary is kept while it still says it
    /// is one.
    async fn settle(&self, gate: &Gate, wakeups: &Wakeups) -> Result<(), LockError> {
        let address = match resolve(
            &self.master_name,
            &self.sentinels,
            &self.template,
            &self.settings,
            &self.shown,
        )
        .await
        {
            Ok(address) => address,
            Err(error) => {
                let known = self.current().address.clone();
                if !matches!(is_primary(&known, &self.settings).await, Ok(true)) {
                    return Err(error);
                }
                tracing::debug!(%error, "leasehold: no sentinel answers; keeping the primary");
                known
            }
        };
        let known = self.current().address.shown.clone();
        if address.shown != known {
            let mut conn = open_primary(&address, &self.settings, self.pushes.clone()).await?;
            let identity = gate.identify(&mut conn).await?;
            tracing::warn!(set = %self.master_name, from = %known, to = %address.shown, "leasehold: the primary failed over; held leases are checked on the new one");
            // The change is announced before any command of this client
            // can reach the new primary: whoever it wakes (the watchdog's
            // check) waits here for the new connection.
            let mut current = self.current.write().unwrap_or_else(PoisonError::into_inner);
            let announced = gate.failed_over(identity);
            *current = Current {
                address: address.clone(),
                conn,
            };
            drop(current);
            announced?;
        } else {
            // Same primary: it may have restarted (a changed run_id).
            let mut conn = self.current().conn.clone();
            gate.check(&mut conn, false).await?;
        }
        if let Some(pubsub) = self.pubsub() {
            let moved = pubsub.move_to(&address, &self.settings).await?;
            if moved {
                wakeups.wake_all();
            }
        }
        if address.shown != known {
            // Releases announced on the old primary were not heard.
            wakeups.wake_all();
        }
        Ok(())
    }
}

/// Follow the primary: look it up again whenever something suggests it
/// moved, until it answers. Ends with the backend.
async fn follow(
    shared: Weak<Shared>,
    gate: Weak<Gate>,
    wakeups: Weak<Wakeups>,
    kick: Arc<Notify>,
    mut pushes: mpsc::UnboundedReceiver<redis::PushInfo>,
    mut switches: mpsc::UnboundedReceiver<()>,
) {
    loop {
        tokio::select! {
            () = kick.notified() => {}
            push = pushes.recv() => match push {
                Some(push) if push.kind == PushKind::Disconnection => {}
                Some(_) => continue,
                None => return,
            },
            Some(()) = switches.recv() => {}
            () = tokio::time::sleep(SAFETY_NET) => {}
        }
        let mut delay = Duration::from_millis(10);
        loop {
            let (Some(shared), Some(gate), Some(wakeups)) =
                (shared.upgrade(), gate.upgrade(), wakeups.upgrade())
            else {
                return;
            };
            match shared.settle(&gate, &wakeups).await {
                Ok(()) => break,
                Err(error) => {
                    tracing::debug!(%error, "leasehold: primary not settled yet");
                }
            }
            drop((shared, gate, wakeups));
            // A sentinel's announcement ends the pause at once.
            tokio::select! {
                () = tokio::time::sleep(delay) => {}
                Some(()) = switches.recv() => {}
            }
            delay = (delay * 2).min(MAX_RESOLVE_DELAY);
        }
    }
}

/// Listen to one sentinel's `+switch-master` announcements for
/// `master_name`, reconnecting as needed, until `alive` is dropped.
async fn hear_switches(
    sentinel: Address,
    client: redis::Client,
    master_name: String,
    switches: mpsc::UnboundedSender<()>,
    mut alive: watch::Receiver<()>,
) {
    let ours = |payload: &str| payload.split(' ').next() == Some(master_name.as_str());
    loop {
        let listening = async {
            let mut pubsub = client.get_async_pubsub().await?;
            pubsub.subscribe(SWITCH_MASTER).await?;
            let mut messages = pubsub.on_message();
            while let Some(message) = messages.next().await {
                if let Ok(payload) = message.get_payload::<String>()
                    && ours(&payload)
                {
                    tracing::info!(sentinel = %sentinel.shown, %payload, "leasehold: a sentinel announced a new primary");
                    let _ = switches.send(());
                }
            }
            Ok::<(), RedisError>(())
        };
        tokio::select! {
            result = listening => {
                if let Err(error) = result {
                    tracing::debug!(sentinel = %sentinel.shown, %error, "leasehold: sentinel announcements interrupted");
                }
            }
            _ = alive.changed() => return,
        }
        tokio::select! {
            () = tokio::time::sleep(SENTINEL_RECONNECT) => {}
            _ = alive.changed() => return,
        }
    }
}

/// A command connection to the current primary that asks for a new lookup
/// when the connection breaks or the server says it is read-only.
#[derive(Clone)]
pub(crate) struct PrimaryConn {
    conn: ConnectionManager,
    kick: Arc<Notify>,
}

impl PrimaryConn {
    fn watch<T>(&self, result: &Result<T, RedisError>) {
        if let Err(e) = result
            && (e.is_io_error()
                || e.is_connection_dropped()
                || e.is_connection_refusal()
                || matches!(
                    e.kind(),
                    redis::ErrorKind::Server(redis::ServerErrorKind::ReadOnly)
                ))
        {
            self.kick.notify_one();
        }
    }
}

impl ConnectionLike for PrimaryConn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            let result = self.conn.req_packed_command(cmd).await;
            self.watch(&result);
            result
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            let result = self.conn.req_packed_commands(pipeline, offset, count).await;
            self.watch(&result);
            result
        })
    }

    fn get_db(&self) -> i64 {
        self.conn.get_db()
    }
}

/// The release listener's connection: subscribed on the current primary,
/// moved (with its channels) when the primary changes.
struct PubSub {
    state: tokio::sync::Mutex<PubSubState>,
    /// Where the listener task reads messages and disconnections.
    pushes: mpsc::UnboundedSender<redis::PushInfo>,
}

struct PubSubState {
    conn: ConnectionManager,
    shown: String,
    channels: HashSet<String>,
}

impl PubSub {
    /// Move to `address` if not there yet; `Ok(true)` if it moved.
    async fn move_to(
        &self,
        address: &Address,
        settings: &ConnectSettings,
    ) -> Result<bool, LockError> {
        let mut state = self.state.lock().await;
        if state.shown == address.shown {
            return Ok(false);
        }
        let mut conn = connect_manager(
            address.resp3_client(settings)?,
            settings,
            &address.shown,
            Some(self.pushes.clone()),
            true,
        )
        .await?;
        for channel in &state.channels {
            conn.subscribe(channel)
                .await
                .map_err(|e| backend_error(&address.shown, e))?;
        }
        state.conn = conn;
        state.shown = address.shown.clone();
        Ok(true)
    }
}

/// The listener task's handle on [`PubSub`].
struct PubSubHandle(Arc<PubSub>);

impl PubSubConnection for PubSubHandle {
    fn subscribe<'a>(&'a mut self, channel: &'a str) -> BoxFuture<'a, redis::RedisResult<()>> {
        Box::pin(async move {
            let mut state = self.0.state.lock().await;
            state.conn.subscribe(channel).await?;
            state.channels.insert(channel.to_owned());
            Ok(())
        })
    }

    fn unsubscribe<'a>(&'a mut self, channel: &'a str) -> BoxFuture<'a, redis::RedisResult<()>> {
        Box::pin(async move {
            let mut state = self.0.state.lock().await;
            state.channels.remove(channel);
            state.conn.unsubscribe(channel).await
        })
    }
}

impl Topology for Sentinel {
    type Conn = PrimaryConn;

    fn connection(&self) -> PrimaryConn {
        PrimaryConn {
            conn: self.shared.current().conn.clone(),
            kick: self.shared.kick.clone(),
        }
    }

    fn start_listener(&self, wakeups: Arc<Wakeups>) -> BoxFuture<'_, Result<Running, LockError>> {
        Box::pin(async move {
            let address = self.shared.current().address.clone();
            let (push_tx, push_rx) = mpsc::unbounded_channel();
            let conn = connect_manager(
                address.resp3_client(&self.shared.settings)?,
                &self.shared.settings,
                &address.shown,
                Some(push_tx.clone()),
                true,
            )
            .await?;
            let pubsub = Arc::new(PubSub {
                state: tokio::sync::Mutex::new(PubSubState {
                    conn,
                    shown: address.shown.clone(),
                    channels: HashSet::new(),
                }),
                pushes: push_tx,
            });
            *self
                .shared
                .pubsub
                .lock()
                .unwrap_or_else(PoisonError::into_inner) = Some(pubsub.clone());
            // The primary may have moved while this connected.
            if self.shared.current().address.shown != address.shown {
                self.shared.kick.notify_one();
            }
            Ok(Running::spawn(
                PubSubHandle(pubsub),
                push_rx,
                self.shared.shown.clone(),
                wakeups,
            ))
        })
    }
}
