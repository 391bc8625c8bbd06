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

use super::gate::Gate;
use super::{RedisBackend, Topology};
use crate::backend::BoxFuture;
use crate::backend::connect::{
    Address, backend_error, connect_manager, shown_all, within_connect_timeout,
};
use crate::backend::listener::{PubSubConnection, Running};
use crate::backend::scripts;
use crate::backend::wakeups::Wakeups;
use crate::config::{ConnectSettings, GateSettings};
use crate::error::{LockError, redact_url};

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

/// How to build the primary's URL from the address a sentinel gives.
#[derive(Clone)]
struct PrimaryTemplate {
    scheme: String,
    /// `user:password` as written (percent-encoded), if any.
    userinfo: Option<String>,
    /// `/db`, or empty.
    path: String,
    /// The query left once leasehold's own parameters are taken out.
    query: Option<String>,
}

impl PrimaryTemplate {
    fn url(&self, host: &str, port: u16) -> String {
        let host = if host.contains(':') && !host.starts_with('[') {
            format!("[{host}]")
        } else {
            host.to_owned()
        };
        let userinfo = self
            .userinfo
            .as_deref()
            .map(|u| format!("{u}@"))
            .unwrap_or_default();
        let query = self
            .query
            .as_deref()
            .map(|q| format!("?{q}"))
            .unwrap_or_default();
        format!(
            "{}://{userinfo}{host}:{port}{}{query}",
            self.scheme, self.path
        )
    }
}

/// Split a sentinel URL into the sentinel's own URL (no path, none of
/// leasehold's parameters) and the template of the primary's.
fn split_sentinel_url(url: &str) -> Result<(String, PrimaryTemplate), LockError> {
    let bad = || {
        LockError::invalid(
            "sentinels",
            format!(
                "`{}` is not a sentinel URL; expected redis://[user:password@]host:port",
                // Redacted whole: a password may contain a `?`.
                redact_url(url)
            ),
        )
    };
    let (scheme, rest) = url.split_once("://").ok_or_else(bad)?;
    let (before_query, query) = match rest.split_once('?') {
        Some((before, query)) => (before, Some(query)),
        None => (rest, None),
    };
    let (authority, path) = match before_query.find('/') {
        Some(slash) => before_query.split_at(slash),
        None => (before_query, ""),
    };
    if authority.is_empty() {
        return Err(bad());
    }
    let (userinfo, _host) = match authority.rfind('@') {
        Some(at) => (Some(&authority[..at]), &authority[at + 1..]),
        None => (None, authority),
    };
    let mut primary_user = None;
    let mut primary_password = None;
    let mut kept = Vec::new();
    for pair in query.into_iter().flat_map(|q| q.split('&')) {
        match pair.split_once('=') {
            Some(("primary_password", value)) => primary_password = Some(value),
            Some(("primary_username", value)) => primary_user = Some(value),
            _ if pair.is_empty() => {}
            _ => kept.push(pair),
        }
    }
    let query = (!kept.is_empty()).then(|| kept.join("&"));
    let primary_userinfo = match primary_password {
        Some("") => None,
        Some(password) => Some(format!("{}:{password}", primary_user.unwrap_or(""))),
        None => userinfo.map(str::to_owned),
    };
    let sentinel_url = match &query {
        Some(q) => format!("{scheme}://{authority}?{q}"),
        None => format!("{scheme}://{authority}"),
    };
    let path = if path == "/" { "" } else { path }.to_owned();
    Ok((
        sentinel_url,
        PrimaryTemplate {
            scheme: scheme.to_owned(),
            userinfo: primary_userinfo,
            path,
            query,
        },
    ))
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

/// The sentinels' addresses, and the template of the primary's URL (from
/// the first sentinel URL).
fn parse_sentinels(urls: &[String]) -> Result<(Vec<Address>, PrimaryTemplate), LockError> {
    let mut sentinels = Vec::new();
    let mut template = None;
    for url in urls {
        let (sentinel_url, primary) = split_sentinel_url(url)?;
        sentinels.push(Address::parse(&sentinel_url)?);
        template.get_or_insert(primary);
    }
    let Some(template) = template else {
        return Err(LockError::invalid("sentinels", "no sentinel URL given"));
    };
    Ok((sentinels, template))
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

/// Ask each sentinel in turn for the primary; the first answer wins. When
/// every sentinel (or the primary it named) refused this client's setup
/// (a wrong password...), the error is [`LockError::Misconfigured`].
async fn resolve(
    master_name: &str,
    sentinels: &[Address],
    template: &PrimaryTemplate,
    settings: &ConnectSettings,
    shown: &str,
) -> Result<Address, LockError> {
    let mut errors = Vec::new();
    let mut setup_errors = 0;
    let mut failed = |error: LockError, errors: &mut Vec<String>| {
        setup_errors += usize::from(error.is_misconfigured());
        errors.push(error.to_string());
    };
    for sentinel in sentinels {
        match ask(master_name, sentinel, settings).await {
            Ok(Some((host, port))) => {
                let address = Address::parse(&template.url(&host, port))?;
                // A sentinel may name a primary that was just demoted.
                match is_primary(&address, settings).await {
                    Ok(true) => return Ok(address),
                    Ok(false) => errors.push(format!("{} is not a primary", address.shown)),
                    Err(e) => failed(e, &mut errors),
                }
            }
            Ok(None) => errors.push(format!(
                "{} knows no primary named `{master_name}`",
                sentinel.shown
            )),
            Err(e) => failed(e, &mut errors),
        }
    }
    let message = format!("no primary found: {}", errors.join("; "));
    Err(if setup_errors > 0 && setup_errors == errors.len() {
        LockError::misconfigured(shown, message)
    } else {
        LockError::backend(shown, message)
    })
}

/// One sentinel's answer to `SENTINEL get-master-addr-by-name`.
async fn ask(
    master_name: &str,
    sentinel: &Address,
    settings: &ConnectSettings,
) -> Result<Option<(String, u16)>, LockError> {
    let client = sentinel.client(settings)?;
    let mut con = within_connect_timeout(
        client.get_multiplexed_async_connection(),
        settings,
        &sentinel.shown,
    )
    .await?;
    let mut cmd = redis::cmd("SENTINEL");
    cmd.arg("get-master-addr-by-name").arg(master_name);
    let asking = cmd.query_async::<Option<(String, u16)>>(&mut con);
    match tokio::time::timeout(settings.response_timeout, asking).await {
        Ok(answer) => answer.map_err(|e| backend_error(&sentinel.shown, e)),
        Err(_) => Err(LockError::backend(&sentinel.shown, "no answer in time")),
    }
}

/// How long `primary` has been the set's primary, as the first sentinel
/// that answers `SENTINEL MASTER` knows it: its `role-reported-time`, the
/// time since it switched to this primary (or, if it started monitoring
/// later, since then: shorter, the safe side). Zero if that sentinel still
/// names another primary (it has not heard of the failover yet); `None` if
/// no sentinel says.
async fn primary_age(
    master_name: &str,
    sentinels: &[Address],
    template: &PrimaryTemplate,
    primary: &Address,
    settings: &ConnectSettings,
) -> Option<Duration> {
    for sentinel in sentinels {
        let Ok(client) = sentinel.client(settings) else {
            continue;
        };
        let Ok(mut con) = within_connect_timeout(
            client.get_multiplexed_async_connection(),
            settings,
            &sentinel.shown,
        )
        .await
        else {
            continue;
        };
        let mut cmd = redis::cmd("SENTINEL");
        cmd.arg("MASTER").arg(master_name);
        let asking = cmd.query_async::<Value>(&mut con);
        let Ok(Ok(reply)) = tokio::time::timeout(settings.response_timeout, asking).await else {
            continue;
        };
        let named = match (
            field(&reply, "ip"),
            field(&reply, "port").and_then(|p| p.parse::<u16>().ok()),
        ) {
            (Some(ip), Some(port)) => redact_url(&template.url(&ip, port)),
            _ => continue,
        };
        if named != primary.shown {
            return Some(Duration::ZERO);
        }
        if let Some(ms) = field(&reply, "role-reported-time").and_then(|v| v.parse().ok()) {
            return Some(Duration::from_millis(ms));
        }
    }
    None
}

/// A field of a `SENTINEL MASTER` reply: a flat array of names and values
/// (RESP2) or a map (RESP3).
fn field(reply: &Value, name: &str) -> Option<String> {
    let text = |v: &Value| match v {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        Value::Int(n) => Some(n.to_string()),
        _ => None,
    };
    match reply {
        Value::Array(items) => items
            .chunks(2)
            .find(|pair| text(&pair[0]).as_deref() == Some(name))
            .and_then(|pair| pair.get(1).and_then(text)),
        Value::Map(pairs) => pairs
            .iter()
            .find(|(k, _)| text(k).as_deref() == Some(name))
            .and_then(|(_, v)| text(v)),
        _ => None,
    }
}

/// Whether the server at `address` says `ROLE` master.
async fn is_primary(address: &Address, settings: &ConnectSettings) -> Result<bool, LockError> {
    let client = address.client(settings)?;
    let mut con = within_connect_timeout(
        client.get_multiplexed_async_connection(),
        settings,
        &address.shown,
    )
    .await?;
    let cmd = redis::cmd("ROLE");
    let asking = cmd.query_async::<Value>(&mut con);
    let role = match tokio::time::timeout(settings.response_timeout, asking).await {
        Ok(role) => role.map_err(|e| backend_error(&address.shown, e))?,
        Err(_) => return Err(LockError::backend(&address.shown, "no answer in time")),
    };
    Ok(match role {
        Value::Array(items) => match items.first() {
            Some(Value::BulkString(role)) => role == b"master",
            Some(Value::SimpleString(role)) => role == "master",
            _ => false,
        },
        _ => false,
    })
}

/// The command connection to a primary (RESP3, so it reports disconnections).
async fn open_primary(
    address: &Address,
    settings: &ConnectSettings,
    pushes: mpsc::UnboundedSender<redis::PushInfo>,
) -> Result<ConnectionManager, LockError> {
    connect_manager(
        address.resp3_client(settings)?,
        settings,
        &address.shown,
        Some(pushes),
        false,
    )
    .await
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sentinel_master_field_is_read_from_either_protocol() {
        let flat = Value::Array(vec![
            Value::BulkString(b"name".to_vec()),
            Value::BulkString(b"mymaster".to_vec()),
            Value::BulkString(b"role-reported-time".to_vec()),
            Value::BulkString(b"1234".to_vec()),
        ]);
        assert_eq!(field(&flat, "role-reported-time").as_deref(), Some("1234"));
        let map = Value::Map(vec![(
            Value::BulkString(b"role-reported-time".to_vec()),
            Value::Int(99),
        )]);
        assert_eq!(field(&map, "role-reported-time").as_deref(), Some("99"));
        assert_eq!(field(&map, "num-slaves"), None);
        assert_eq!(field(&Value::Nil, "role-reported-time"), None);
    }

    #[test]
    fn sentinel_urls_split_into_the_sentinel_and_the_primary() -> Result<(), LockError> {
        let (sentinel, primary) =
            split_sentinel_url("redis://:spw@s1:26379/2?primary_password=ppw&protocol=resp3")?;
        assert_eq!(sentinel, "redis://:spw@s1:26379?protocol=resp3");
        assert_eq!(
            primary.url("10.0.0.1", 6380),
            "redis://:ppw@10.0.0.1:6380/2?protocol=resp3"
        );

        let (sentinel, primary) = split_sentinel_url("redis://u:pw@s1:26379")?;
        assert_eq!(sentinel, "redis://u:pw@s1:26379");
        assert_eq!(primary.url("::1", 7000), "redis://u:pw@[::1]:7000");

        let (_, primary) = split_sentinel_url("redis://:spw@s1?primary_password=&x=1")?;
        assert_eq!(primary.url("h", 1), "redis://h:1?x=1");

        let Err(err) = split_sentinel_url("s1:26379?primary_password=secret") else {
            panic!("a URL without a scheme is refused");
        };
        let err = err.to_string();
        assert!(!err.contains("secret"), "{err}");
        Ok(())
    }
}
