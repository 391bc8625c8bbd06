//! Redis Cluster, through redis-rs's cluster-async connection.
//!
//! - **Routing.** Every Redis name of one lock carries the lock's key as its
//!   hash tag (see [`super`]), so each script touches one slot and the cluster
//!   connection routes it to that slot's master. `MOVED` (the slot has moved)
//!   and `ASK` (it is being migrated) are followed by redis-rs, which also
//!   refreshes its slot map; `TRYAGAIN` is retried after a short pause.
//!   While a slot is half-migrated, Redis runs a multi-key script only if
//!   all its keys are on one side: renewing and extending a held lock (one
//!   key) work throughout, but taking or releasing a lock in that slot (the
//!   lock, its fence and its line) can answer `TRYAGAIN` until the migration
//!   ends. A request retries within its `wait` budget; a release is retried
//!   until it lands or the lease's validity ends.
//! - **Scripts.** They are loaded on every node at connect; a node that lacks
//!   one later (restarted, added, or reached through `ASK`) answers `NOSCRIPT`,
//!   and the invocation loads it (`SCRIPT LOAD` goes to all nodes) and retries.
//! - **Renewal.** A script cannot span slots (`CROSSSLOT`), so the watchdog's
//!   batch is split by slot, one renewal script per slot, all sent at once
//!   over the multiplexed node connections: the round trips overlap, and the
//!   results come back in the batch's order.
//! - **Each primary's identity.** A primary can restart empty (same node
//!   id and slots, a new process) or be replaced by a promoted replica
//!   while the others run on, and redis-rs reconnects to it by itself. The
//!   command connection speaks RESP3 so that it reports every broken node
//!   connection, and its node connections report a `MOVED` or `READONLY`
//!   (a slot changed hands, maybe by a failover that broke no connection:
//!   see `redirects.rs`): the gate then forgets which primaries were checked, a
//!   background task reads the slot map and every primary's `INFO` again
//!   (retrying the ones that do not answer until they do), and a grant on
//!   a primary not read since reads it first. Restarts and failovers found
//!   so are announced at once (the holders' leases are checked), and the
//!   gate judges each key by the primary of its slot (see `gate/nodes.rs`).
//!   The slot map is asked of every primary it names, and taken only when
//!   they agree: for a few ms after a failover, nodes that have not heard
//!   of it yet still name the old primary, whose unchanged identity would
//!   hide the takeover.
//!   Nothing of this runs on the path of an acquisition in the common case:
//!   the check there is a lookup in the gate.
//! - **Release notifications.** On Redis ≥ 7 (checked once at connect), the
//!   release script publishes with `SPUBLISH` and waiters listen with
//!   `SSUBSCRIBE`: the message stays on the shard that owns the lock instead of
//!   being broadcast to every node. Older servers get `PUBLISH`/`SUBSCRIBE`.
//!   The listener is one extra RESP3 cluster connection, opened on the first
//!   wait. When a slot moves, the old owner drops its sharded subscriptions
//!   (a server-sent `SUNSUBSCRIBE`); the listener subscribes again on the new
//!   owner and wakes that lock's first waiter, since a release may have been
//!   published in between (see `sharded.rs`).

use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::Duration;

use futures_util::future::join_all;
use redis::cluster::{ClusterClient, ClusterClientBuilder};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo, Slot};
use redis::{ConnectionInfo, ErrorKind, ProtocolVersion, PushKind, RedisError, RedisResult, Value};
use tokio::sync::{Notify, mpsc};

use super::gate::{Gate, Identity, Seen, slot_of, within};
use super::redirects::{self, Watched};
use super::sharded::{ClusterPubSub, Wanted, follow_moved_subscriptions, forward};
use super::{RedisBackend, Topology, scan_command};
use crate::backend::connect::{backend_error, parse_all, shown_all, within_connect_timeout};
use crate::backend::listener::Running;
use crate::backend::scripts::{self, ScriptError};
use crate::backend::wakeups::Wakeups;
use crate::backend::{BoxFuture, LockKeys, Owned, Renewal};
use crate::config::{ConnectSettings, GateSettings};
use crate::error::LockError;

/// Retries of one request (redirects, `TRYAGAIN`, reconnects), at least this
/// many: following a migration can take a `MOVED`, an `ASK` and a `TRYAGAIN`.
const MIN_RETRIES: u32 = 6;

/// Reads of the primaries' identities for one grant, when each is
/// overtaken by another disconnection or redirect, or the nodes disagree on
/// the slot map (a failover in progress).
const MAX_CHECKS: u32 = 5;

/// The longest pause between two reads of the primaries' identities after
/// a node connection broke, while one of them does not answer.
const MAX_CHECK_DELAY: Duration = Duration::from_millis(500);

/// The command connection: its node connections report a slot that
/// changed hands (see `redirects.rs`).
pub(crate) type Commands = ClusterConnection<Watched>;

pub(crate) struct Cluster {
    conn: Commands,
    /// The seed nodes, for the listener connection opened on the first wait.
    nodes: Vec<ConnectionInfo>,
    settings: ConnectSettings,
    /// `cluster[redis://a:***@h:p, ...]`.
    server: String,
    /// Sharded pub/sub (`SPUBLISH`/`SSUBSCRIBE`, Redis ≥ 7).
    sharded: bool,
}

/// The Redis Cluster backend.
pub(crate) type ClusterBackend = RedisBackend<Cluster>;

impl Cluster {
    /// Connect through any of the cluster's nodes (the others are
    /// discovered); `urls` as checked by `Target::check`.
    pub(crate) async fn connect(
        urls: &[String],
        settings: &ConnectSettings,
        gate_settings: GateSettings,
    ) -> Result<ClusterBackend, LockError> {
        let addresses = parse_all(urls)?;
        let server = format!("cluster[{}]", shown_all(&addresses, ", "));
        let nodes: Vec<ConnectionInfo> = addresses.into_iter().map(|a| a.info).collect();

        let gate = Arc::new(Gate::new_cluster(&server, gate_settings));
        let broke = Arc::new(Notify::new());
        let builder = cluster_builder(&nodes, settings)
            .use_protocol(ProtocolVersion::RESP3)
            .push_sender(tell_gate(&gate, &broke));
        let client = build_client(builder, &server)?;
        let mut conn = within_connect_timeout(
            client.get_async_generic_connection::<Watched>(),
            settings,
            &server,
        )
        .await?;
        redirects::watch(&gate, &broke);
        let mut delay = Duration::from_millis(10);
        for check in 1..=MAX_CHECKS {
            match check_primaries(&conn, &gate, true, None).await? {
                Checked::All => break,
                Checked::Disagree if check < MAX_CHECKS => {
                    tokio::time::sleep(delay).await;
                    delay *= 2;
                }
                _ => return Err(not_all(&server)),
            }
        }
        tokio::spawn(recheck_after_breaks(
            broke,
            conn.clone(),
            Arc::downgrade(&gate),
        ));
        let sharded = supports_sharded_pubsub(&mut conn)
            .await
            .map_err(|e| backend_error(&server, e))?;
        for script in scripts::all() {
            // Routed to every node. Saves a NOSCRIPT round trip later, and
            // finds a node that cannot run Lua now.
            script.load_async(&mut conn).await.map_err(|e| {
                scripts::without_lua(&server, &e).unwrap_or_else(|| backend_error(&server, e))
            })?;
        }
        let topology = Cluster {
            conn,
            nodes,
            settings: settings.clone(),
            server: server.clone(),
            sharded,
        };
        Ok(RedisBackend::new(topology, server, Arc::default(), gate))
    }

    /// Renew a batch spread over many slots: one script per slot, all in
    /// flight at once; results in the batch's order.
    async fn renew_by_slot(
        &self,
        batch: &[Renewal],
        offered: &scripts::Offered,
    ) -> Result<Vec<Owned>, ScriptError> {
        let mut groups: HashMap<Slot, Vec<usize>> = HashMap::new();
        for (index, item) in batch.iter().enumerate() {
            groups
                .entry(Slot::for_key(item.keys.lock().as_bytes()))
                .or_default()
                .push(index);
        }
        if groups.len() <= 1 {
            let mut con = self.conn.clone();
            return scripts::renew(&mut con, batch, offered).await;
        }

        let calls = groups.into_values().map(|indices| {
            let mut con = self.conn.clone();
            async move {
                let items: Vec<Renewal> = indices.iter().map(|&i| batch[i].clone()).collect();
                let codes = scripts::renew(&mut con, &items, offered).await;
                (indices, codes)
            }
        });
        let mut out = vec![Owned::No; batch.len()];
        for (indices, codes) in join_all(calls).await {
            let codes = codes?;
            if codes.len() != indices.len() {
                return Err(ScriptError::Redis(RedisError::from((
                    ErrorKind::UnexpectedReturnType,
                    "the renewal script answered a different number of results than leases",
                ))));
            }
            for (index, code) in indices.into_iter().zip(codes) {
                out[index] = code;
            }
        }
        Ok(out)
    }
}

/// The command connection's push sender: a broken node connection is told
/// to the gate at once (which primary is not said: all are checked again),
/// and wakes [`recheck_after_breaks`].
fn tell_gate(
    gate: &Arc<Gate>,
    broke: &Arc<Notify>,
) -> impl Fn(redis::PushInfo) -> Result<(), std::convert::Infallible> + Send + Sync + 'static {
    let (gate, broke) = (Arc::downgrade(gate), broke.clone());
    move |push: redis::PushInfo| {
        if push.kind == PushKind::Disconnection
            && let Some(gate) = gate.upgrade()
        {
            gate.disconnected();
            broke.notify_one();
        }
        Ok(())
    }
}

/// After a node connection broke, read every primary's identity again
/// until all have answered: a primary that restarted or was replaced is
/// found as soon as it is back, and the leases held there are checked then
/// (not at their next renewal). Ends with the backend.
async fn recheck_after_breaks(broke: Arc<Notify>, conn: Commands, gate: Weak<Gate>) {
    // Ends when the gate (and so the backend) is gone: this task holds the
    // connection, whose push sender holds `broke`.
    let Some(mut gone) = gate.upgrade().map(|g| g.changes()) else {
        return;
    };
    loop {
        tokio::select! {
            () = broke.notified() => {}
            changed = gone.changed() => match changed {
                Ok(()) => continue,
                Err(_) => return,
            },
        }
        let mut delay = Duration::from_millis(10);
        loop {
            let Some(gate) = gate.upgrade() else {
                return;
            };
            match check_primaries(&conn, &gate, false, None).await {
                Ok(Checked::All) => break,
                Ok(Checked::Missing) => {
                    tracing::debug!("leasehold: a cluster primary not back yet")
                }
                Ok(Checked::Disagree) => {}
                Err(error) => tracing::debug!(%error, "leasehold: cluster not back yet"),
            }
            drop(gate);
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(MAX_CHECK_DELAY);
        }
    }
}

fn not_all(server: &str) -> LockError {
    LockError::Unavailable {
        key: None,
        server: server.to_owned(),
        reason: "a primary did not answer, or the nodes disagree on the slot map (a failover \
                 being told around); a primary's identity is read before it grants anything \
                 after its connection broke or a slot changed hands (it may have restarted \
                 empty, or be a replica promoted without the data)"
            .to_owned(),
        retry_after: None,
    }
}

/// One primary in `CLUSTER SLOTS`: node id, host, port, slot ranges.
type Primary = (String, String, u16, Vec<(u16, u16)>);

/// What one reading of the primaries found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Checked {
    /// Every primary read answered (and was applied).
    All,
    /// A primary did not answer (the others were applied).
    Missing,
    /// The primaries disagree on who serves which slots (a failover or a
    /// migration being told around the cluster): nothing was applied.
    Disagree,
}

/// Read the slot map and the `INFO` of every primary (`only`: of the one
/// serving that slot), all at once, each routed to its address, and apply
/// them to the gate. The slot map is asked of one node, then of every
/// primary it names, and applied only when they all agree: a node that has
/// not heard of a failover yet names the old primary, whose identity (the
/// same as before) would hide the takeover, and a grant the promoted
/// replica just made would be taken as checked. The old primary itself, or
/// the new one, knows: while it disagrees with the others, nothing is
/// taken as checked.
async fn check_primaries(
    conn: &Commands,
    gate: &Gate,
    first: bool,
    only: Option<u16>,
) -> Result<Checked, LockError> {
    let server = gate.server();
    let connection = gate.connection_number();
    let mut con = conn.clone();
    let map = slot_map(&mut con)
        .await
        .map_err(|e| backend_error(server, e))?;
    let reads = join_all(map.iter().map(|(_, host, port, slots)| {
        let mut con = conn.clone();
        let routing = RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress {
            host: host.clone(),
            port: *port,
        });
        let wanted = only.is_none_or(|slot| within(slots, slot));
        async move {
            let mut view = redis::cmd("CLUSTER");
            view.arg("SLOTS");
            let view = con.route_command(view, routing.clone()).await;
            let info = if wanted {
                Some(con.route_command(redis::cmd("INFO"), routing).await)
            } else {
                None
            };
            (view, info)
        }
    }))
    .await;
    let mine = owners(&map);
    for (view, _) in &reads {
        // A primary that does not answer is judged by its INFO below.
        if let Ok(view) = view
            && primaries_of(view).is_ok_and(|theirs| owners(&theirs) != mine)
        {
            tracing::debug!(
                server,
                "leasehold: the cluster's nodes disagree on the slot map; reading again"
            );
            return Ok(Checked::Disagree);
        }
    }
    let mut answered = Vec::new();
    let mut seen = Vec::with_capacity(map.len());
    let mut all = true;
    for ((id, host, port, slots), (_, info)) in map.into_iter().zip(reads) {
        let identity = match info {
            None => None,
            Some(Ok(info)) => {
                let identity = Identity::from_info(&info);
                answered.push(info);
                Some(identity)
            }
            Some(Err(error)) => {
                tracing::debug!(%error, host, port, "leasehold: a cluster primary did not answer INFO");
                all = false;
                None
            }
        };
        seen.push(Seen {
            id,
            slots,
            identity,
        });
    }
    gate.apply_cluster(
        seen,
        Identity::from_info(&Value::Array(answered)),
        first,
        connection,
    )?;
    Ok(if all { Checked::All } else { Checked::Missing })
}

/// Who serves which slots, in a form two readings compare by: each
/// primary's node id and its slot ranges, sorted.
fn owners(map: &[Primary]) -> Vec<(&str, Vec<(u16, u16)>)> {
    let mut owners: Vec<(&str, Vec<(u16, u16)>)> = map
        .iter()
        .map(|(id, _, _, slots)| {
            let mut slots = slots.clone();
            slots.sort_unstable();
            (id.as_str(), slots)
        })
        .collect();
    owners.sort_unstable();
    owners
}

/// The primaries and their slots, from `CLUSTER SLOTS` (asked of any node).
async fn slot_map(conn: &mut Commands) -> RedisResult<Vec<Primary>> {
    let reply: Value = redis::cmd("CLUSTER").arg("SLOTS").query_async(conn).await?;
    primaries_of(&reply)
}

/// The primaries and their slots in a `CLUSTER SLOTS` reply.
fn primaries_of(reply: &Value) -> RedisResult<Vec<Primary>> {
    let ranges: Vec<Value> = redis::from_redis_value_ref(reply)?;
    let mut found: Vec<Primary> = Vec::new();
    for range in ranges {
        // [start, end, [host, port, id, ...], replicas...]
        let Value::Array(parts) = range else { continue };
        let (Some(start), Some(end), Some(Value::Array(primary))) =
            (parts.first(), parts.get(1), parts.get(2))
        else {
            continue;
        };
        let (Some(host), Some(port), Some(id)) = (primary.first(), primary.get(1), primary.get(2))
        else {
            continue;
        };
        let start: u16 = redis::from_redis_value_ref(start)?;
        let end: u16 = redis::from_redis_value_ref(end)?;
        let host: String = redis::from_redis_value_ref(host)?;
        let port: u16 = redis::from_redis_value_ref(port)?;
        let id: String = redis::from_redis_value_ref(id)?;
        match found.iter_mut().find(|p| p.0 == id) {
            Some(p) => p.3.push((start, end)),
            None => found.push((id, host, port, vec![(start, end)])),
        }
    }
    Ok(found)
}

/// The primaries (host, port) that serve slots now, from `CLUSTER SLOTS`.
async fn primaries(conn: &mut Commands) -> RedisResult<Vec<(String, u16)>> {
    let map = slot_map(conn).await?;
    Ok(map
        .into_iter()
        .map(|(_, host, port, _)| (host, port))
        .collect())
}

/// Every key matching `glob` on the primary at `host:port`, by `SCAN`.
async fn scan_node(
    mut conn: Commands,
    host: String,
    port: u16,
    glob: &str,
) -> RedisResult<Vec<String>> {
    let mut names = Vec::new();
    let mut cursor: u64 = 0;
    loop {
        let routing = RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress {
            host: host.clone(),
            port,
        });
        let reply = conn
            .route_command(scan_command(cursor, glob), routing)
            .await?;
        let (next, page): (u64, Vec<String>) = redis::from_redis_value(reply)?;
        names.extend(page);
        if next == 0 {
            return Ok(names);
        }
        cursor = next;
    }
}

/// A cluster client for the seed nodes, with leasehold's timeouts and retries.
fn cluster_builder(nodes: &[ConnectionInfo], settings: &ConnectSettings) -> ClusterClientBuilder {
    let retries = u32::try_from(settings.reconnect_retries)
        .unwrap_or(u32::MAX)
        .max(MIN_RETRIES);
    let builder = ClusterClient::builder(nodes.to_vec())
        .connection_timeout(settings.connect_timeout)
        .response_timeout(settings.response_timeout)
        .retries(retries)
        // redis-rs waits at least 1.28 s before retrying a `TRYAGAIN` or a
        // `CLUSTERDOWN` by default: longer than many leases.
        .min_retry_wait(10)
        .max_retry_wait(500)
        .retry_wait_formula(10, 2);
    // Custom certificates apply to `rediss://` seed nodes (and so to every
    // node discovered from them); plain nodes ignore them.
    #[cfg(feature = "tls")]
    let builder = match &settings.tls {
        Some(certs)
            if nodes
                .iter()
                .any(|n| matches!(n.addr(), redis::ConnectionAddr::TcpTls { .. })) =>
        {
            builder.certs(certs.clone())
        }
        _ => builder,
    };
    builder
}

fn build_client(builder: ClusterClientBuilder, server: &str) -> Result<ClusterClient, LockError> {
    builder.build().map_err(|e| {
        if e.kind() == ErrorKind::InvalidClientConfig {
            // Unix sockets, or seed nodes with different credentials, databases, TLS modes.
            LockError::invalid("urls", format!("{server}: {e}"))
        } else {
            backend_error(server, e)
        }
    })
}

/// Whether the servers know `SPUBLISH` (Redis ≥ 7). A server that refuses
/// `COMMAND INFO` (renamed or forbidden, as on some managed services) gets
/// plain pub/sub, which works everywhere.
async fn supports_sharded_pubsub(conn: &mut Commands) -> RedisResult<bool> {
    let reply: RedisResult<Vec<Value>> = redis::cmd("COMMAND")
        .arg("INFO")
        .arg("SPUBLISH")
        .query_async(conn)
        .await;
    match reply {
        Ok(info) => Ok(matches!(info.first(), Some(v) if *v != Value::Nil)),
        Err(e) if matches!(e.kind(), ErrorKind::Server(_)) => {
            tracing::debug!(error = %e, "leasehold: COMMAND INFO refused; using PUBLISH");
            Ok(false)
        }
        Err(e) => Err(e),
    }
}

impl Topology for Cluster {
    type Conn = Commands;

    fn connection(&self) -> Commands {
        self.conn.clone()
    }

    fn publish(&self) -> &'static str {
        if self.sharded { "SPUBLISH" } else { "PUBLISH" }
    }

    fn waits_for_replicas(&self) -> bool {
        false
    }

    fn fast_path(&self) -> bool {
        false
    }

    fn one_slot(&self) -> bool {
        false
    }

    fn same_slot(&self, names: &[&str]) -> bool {
        let mut slots = names.iter().map(|name| Slot::for_key(name.as_bytes()));
        let first = slots.next();
        slots.all(|slot| Some(slot) == first)
    }

    fn slot_of(&self, keys: &LockKeys) -> Option<u16> {
        Some(slot_of(keys.lock().as_bytes()))
    }

    /// The slot map and the identity of the primary serving `slot` (every
    /// primary's without one); an error when it did not answer (a primary
    /// that is down holds up no grant on the others).
    fn verify<'a>(
        &'a self,
        gate: &'a Gate,
        slot: Option<u16>,
    ) -> BoxFuture<'a, Result<(), LockError>> {
        Box::pin(async move {
            // A check that a disconnection or a redirect overtook marks
            // nothing checked (see `Gate::apply_cluster`): read again, a
            // few times, while every primary answers.
            // The nodes may disagree on the slot map for a few ms after a
            // failover: read again after a short pause.
            let mut delay = Duration::from_millis(5);
            for _ in 0..MAX_CHECKS {
                let found = check_primaries(&self.conn, gate, false, slot).await?;
                let checked = match slot {
                    Some(slot) => gate.is_node_verified(slot),
                    None => gate.is_verified(),
                };
                if checked && found != Checked::Disagree {
                    return Ok(());
                }
                match found {
                    Checked::Missing => break,
                    Checked::Disagree => {
                        tokio::time::sleep(delay).await;
                        delay *= 2;
                    }
                    Checked::All => {}
                }
            }
            Err(not_all(&self.server))
        })
    }

    fn renew<'a>(
        &'a self,
        batch: &'a [Renewal],
        offered: &'a scripts::Offered,
    ) -> BoxFuture<'a, Result<Vec<Owned>, ScriptError>> {
        Box::pin(self.renew_by_slot(batch, offered))
    }

    /// `SCAN` on every primary, all at once.
    fn scan<'a>(&'a self, glob: &'a str) -> BoxFuture<'a, Result<Vec<String>, RedisError>> {
        Box::pin(async move {
            let mut conn = self.conn.clone();
            let nodes = primaries(&mut conn).await?;
            let scans = nodes
                .into_iter()
                .map(|(host, port)| scan_node(self.conn.clone(), host, port, glob));
            let mut names = Vec::new();
            for found in join_all(scans).await {
                names.extend(found?);
            }
            Ok(names)
        })
    }

    /// The listener: one RESP3 cluster connection, opened on the first wait.
    fn start_listener(&self, wakeups: Arc<Wakeups>) -> BoxFuture<'_, Result<Running, LockError>> {
        Box::pin(async move {
            let (push_tx, push_rx) = mpsc::unbounded_channel();
            let builder = cluster_builder(&self.nodes, &self.settings)
                .use_protocol(ProtocolVersion::RESP3)
                .push_sender(push_tx);
            let client = build_client(builder, &self.server)?;
            let conn =
                within_connect_timeout(client.get_async_connection(), &self.settings, &self.server)
                    .await?;
            let wanted: Wanted = Arc::default();
            let (listener_tx, listener_rx) = mpsc::unbounded_channel();
            if self.sharded {
                tokio::spawn(follow_moved_subscriptions(
                    push_rx,
                    listener_tx,
                    conn.clone(),
                    wanted.clone(),
                    wakeups.clone(),
                ));
            } else {
                tokio::spawn(forward(push_rx, listener_tx));
            }
            let pubsub = ClusterPubSub::new(conn, self.sharded, wanted);
            Ok(Running::spawn(
                pubsub,
                listener_rx,
                self.server.clone(),
                wakeups,
            ))
        })
    }
}
