//! The gate: what this client knows of a server's identity, and whether it
//! may grant a lock there now: data loss (a restart, a failover) is
//! detected, not trusted.
//!
//! Its callers use three verbs: [`Gate::admit`] before an attempt (may this
//! key be granted?), [`Gate::survived`] when the server shows that a key's
//! state survived a change, and [`Gate::check`] when the connection is new.
//! The states below stay inside this file.
//!
//! - **Eviction.** A server whose `maxmemory-policy` can evict keys
//!   (`allkeys-*`, `volatile-*`: lock keys have TTLs) could drop a held lock
//!   under memory pressure and let a second holder in. It is refused at
//!   connect (and locks are refused if it turns up on a reconnect), unless
//!   the client allows eviction, which then only warns once.
//! - **Restarts and failovers, per key.** The server's `run_id` is read at
//!   connect and after every reconnection. A changed `run_id` (or a Sentinel
//!   failover) means a server that may have lost locks held by other
//!   clients, which still believe they hold them. The gate remembers, per
//!   key, the leases this client asked for (granted or not) while they could
//!   still run; at a change, each key asked for with a lease of `ttl` within
//!   `ttl` before the change is closed until `ttl` after it (a peer running
//!   the same code holds it with a similar lease); a key in whose line a
//!   waiter of this client stands counts as asked for all the while (its
//!   last attempt may be older than its lease). Other keys stay open. A
//!   closed key opens early once the server shows that its state survived
//!   *this* change: this client's lease on it was found or released there,
//!   or its survival mark is there: for as long as keys stay closed after a
//!   change it saw, a client's release of a lease (held across the change)
//!   leaves `P{K}:survived` behind, naming the server's new `run_id`, so
//!   that the others see it too. A lock key that is there is no evidence
//!   (it may be a lease granted after the change by an attempt in flight
//!   over it, taken back by its client a moment later): the caller answers
//!   busy then, and the key stays closed (`acquire.rs`).
//! - **Restart grace.** With `restart_grace(d)`, a server whose uptime is
//!   below `d` grants nothing until it is `d` old: this covers clients that
//!   never saw the restart (they connected afterwards).
//! - **Redis Cluster.** Each primary is a server of its own (see
//!   `nodes.rs`): its identity, grace and changes are kept per primary, and
//!   a key is judged by the primary that serves its slot. A restart of one
//!   primary closes only the keys asked for in its slots; slots taken over
//!   by a promoted replica are closed as after a failover.
//!
//! A refusal is [`LockError::Unavailable`] with the time left, never `Busy`.
//! Read with `INFO` (not `CONFIG GET`, which managed services often disable).

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use redis::Value;
use redis::aio::ConnectionLike;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::backend::ServerChange;
use crate::backend::connect::backend_error;
use crate::backend::scripts::Offered;
use crate::config::GateSettings;
use crate::error::{LockError, LostCause};

mod asks;
mod identity;
mod nodes;

use asks::{Asks, KeyHash, Standing};
pub(crate) use identity::Identity;
use identity::evicts;
#[cfg(feature = "cluster")]
use nodes::Node;
use nodes::Nodes;
#[cfg(feature = "cluster")]
pub(crate) use nodes::{Seen, slot_of, within};

/// How many keys' asks are kept before the expired ones are swept out.
const SWEEP_AT: usize = 1024;

pub(crate) struct Gate {
    server: String,
    settings: GateSettings,
    state: Mutex<State>,
    /// A change was seen and releases may have to leave the survival mark
    /// (a fast path: nothing to do in the common case).
    marking: AtomicBool,
    /// Some key is closed (a fast path for the hooks of every renewal and
    /// release: nothing to do in the common case).
    any_closed: AtomicBool,
    /// The server's identity was read on the current connection.
    verified: AtomicBool,
    /// Counts the disconnections of the command connection.
    connections: AtomicU64,
    /// The native conditional commands the server offers (its `INFO`).
    offered: Offered,
    changes: watch::Sender<ServerChange>,
}

#[derive(Default)]
struct State {
    run_id: Option<String>,
    /// No grants at all before this instant (the restart grace).
    young_until: Option<Instant>,
    /// Per key (by its [`KeyHash`]): its slot (Cluster; zero otherwise)
    /// and the leases asked for that could still run (see the module docs).
    asks: HashMap<u64, (u16, Asks), KeyHash>,
    /// Per key (by its [`KeyHash`]): its slot and the leases of this
    /// client's waiters in its line now. Each asks for the key for as long
    /// as it stands there, attempt or not.
    standing: HashMap<u64, (u16, Standing), KeyHash>,
    /// Keys asked for before a change (by their [`KeyHash`]), each closed
    /// until then, and why.
    closed: HashMap<u64, (Instant, LostCause), KeyHash>,
    /// Hashes keys for `asks` and `closed` (keyed per gate, so that key
    /// names cannot be chosen to collide).
    hasher: RandomState,
    /// Until when releases leave the survival mark: as long as clients
    /// that saw the last change may keep a key closed.
    mark_until: Option<Instant>,
    /// When this client saw the last change: only a lease granted before
    /// it was held across it, and only its release leaves the mark.
    changed_at: Option<Instant>,
    /// The map size at which the next sweep of `asks` runs.
    sweep_at: usize,
    /// Grants refused outright (an evicting server seen on a reconnect).
    refused: Option<LockError>,
    warned_eviction: bool,
    /// Redis Cluster: each primary's own identity, grace and changes
    /// (`run_id`, `young_until` and `changed_at` above are then unused,
    /// but `changed_at` keeps the latest change of any primary).
    cluster: Option<Nodes>,
}

/// Whether a key may be granted now.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Admission {
    /// Yes.
    Open,
    /// No: the error to return (`LockError::Unavailable`, with the time left).
    Closed(LockError),
    /// Not unless the server shows that the key's state survived the last
    /// change (its survival mark names the server as it is now): then call
    /// [`Gate::survived`] and go on; otherwise busy while a lock is there,
    /// else return the error.
    Check(LockError),
}

impl Gate {
    pub(crate) fn new(server: &str, settings: GateSettings) -> Gate {
        Gate::with_state(server, settings, None)
    }

    /// The gate of a Redis Cluster: per primary (see `nodes.rs`).
    #[cfg(feature = "cluster")]
    pub(crate) fn new_cluster(server: &str, settings: GateSettings) -> Gate {
        Gate::with_state(server, settings, Some(Nodes::default()))
    }

    fn with_state(server: &str, settings: GateSettings, cluster: Option<Nodes>) -> Gate {
        Gate {
            server: server.to_owned(),
            settings,
            state: Mutex::new(State {
                sweep_at: SWEEP_AT,
                cluster,
                ..State::default()
            }),
            marking: AtomicBool::new(false),
            any_closed: AtomicBool::new(false),
            verified: AtomicBool::new(false),
            connections: AtomicU64::new(0),
            offered: Offered::default(),
            changes: watch::channel(ServerChange::default()).0,
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // Every update is a handful of map and field writes that cannot panic.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Before an attempt on `key` (in `slot`, on Redis Cluster) with a
    /// lease of `ttl`: remember the ask (granted or not, it tells how long a
    /// peer may hold this key), and say whether the key may be granted now.
    pub(crate) fn admit(
        &self,
        key: &str,
        slot: Option<u16>,
        ttl: Duration,
    ) -> Result<Admission, LockError> {
        let now = Instant::now();
        let mut state = self.state();
        if let Some(refused) = &state.refused {
            return Err(refused.clone().with_key(key));
        }
        let hash = state.hash(key);
        state.remember(hash, slot.unwrap_or(0), ttl, now);
        let young = match (&state.cluster, slot) {
            (Some(nodes), Some(slot)) => nodes.owner(slot).and_then(|node| node.young_until),
            _ => state.young_until,
        };
        if let Some(until) = young {
            if now < until {
                let reason = format!(
                    "it is younger than the restart grace ({:?}); a lock held before it started may still be relied on",
                    self.settings.restart_grace
                );
                return Ok(Admission::Closed(self.refusal(key, reason, until - now)));
            }
            if state.cluster.is_none() {
                state.young_until = None;
            }
        }
        if !self.any_closed.load(Ordering::Acquire) {
            return Ok(Admission::Open);
        }
        let Some(&(until, cause)) = state.closed.get(&hash) else {
            return Ok(Admission::Open);
        };
        if now >= until {
            state.closed.remove(&hash);
            self.flag(&state);
            return Ok(Admission::Open);
        }
        let what = match cause {
            LostCause::FailedOver => "it failed over",
            _ => "it restarted",
        };
        let reason = format!(
            "{what} and may have lost a lease of this key that another client still relies on"
        );
        Ok(Admission::Check(self.refusal(key, reason, until - now)))
    }

    /// These leases `(key, ttl)` were renewed (a check, ttl zero, is
    /// skipped): like asks, they tell how long each key may be held (by
    /// this client) after a change; and found there, each key survived any
    /// change. One lock of the state for the whole batch.
    pub(crate) fn renewed<'k>(
        &self,
        leases: impl IntoIterator<Item = (&'k str, Option<u16>, Duration)>,
    ) {
        let now = Instant::now();
        let mut state = self.state();
        for (key, slot, ttl) in leases {
            let hash = state.hash(key);
            if !ttl.is_zero() {
                state.remember(hash, slot.unwrap_or(0), ttl, now);
            }
            state.closed.remove(&hash);
        }
        self.flag(&state);
    }

    /// Keep the fast-path flags in step with `state`.
    fn flag(&self, state: &State) {
        self.any_closed
            .store(!state.closed.is_empty(), Ordering::Release);
        self.marking
            .store(state.mark_until.is_some(), Ordering::Release);
    }

    fn refusal(&self, key: &str, reason: String, left: Duration) -> LockError {
        LockError::Unavailable {
            key: Some(key.to_owned()),
            server: self.server.clone(),
            reason,
            retry_after: Some(left),
        }
    }

    /// The server showed that `key`'s state survived the last change (its
    /// survival mark; this client's lease on it was found or released
    /// there): grant it as usual again.
    pub(crate) fn survived(&self, key: &str) {
        if !self.any_closed.load(Ordering::Acquire) {
            return;
        }
        let mut state = self.state();
        let hash = state.hash(key);
        state.closed.remove(&hash);
        self.flag(&state);
    }

    /// A waiter of this client with a lease of `ttl` took a place in
    /// `key`'s line (`stands`), or left it: while it stands there, a change
    /// closes the key for that lease as if it had just asked (its last
    /// attempt may be older than its lease: it sleeps on the holder's
    /// lease and keeps its place without asking again).
    pub(crate) fn stand(&self, key: &str, slot: Option<u16>, ttl: Duration, stands: bool) {
        let mut state = self.state();
        let hash = state.hash(key);
        if stands {
            let entry = state.standing.entry(hash);
            entry
                .or_insert_with(|| (slot.unwrap_or(0), Standing::default()))
                .1
                .join(ttl);
        } else if let Some((_, standing)) = state.standing.get_mut(&hash)
            && !standing.leave(ttl)
        {
            state.standing.remove(&hash);
        }
    }

    /// How long the release of a lease granted at `granted_at` leaves the
    /// survival mark now, and the mark's value (the tag of the server's
    /// `run_id`, see [`identity_tag`](Self::identity_tag)). `None`: it
    /// leaves none; the common case, without a change seen lately. Only a
    /// lease granted before the last change was held across it: released
    /// here, it shows that its key's state survived *this* change. A lease
    /// granted after the change shows nothing about the leases the change
    /// may have lost, and leaves no mark.
    pub(crate) fn survival_mark(
        &self,
        granted_at: Instant,
        slot: impl FnOnce() -> Option<u16>,
    ) -> Option<(Duration, u64)> {
        if !self.marking.load(Ordering::Acquire) {
            return None;
        }
        let now = Instant::now();
        let mut state = self.state();
        match state.mark_until {
            Some(until) if until > now => {
                let (changed_at, run_id) = state.server(slot());
                let held_across = changed_at.is_some_and(|at| granted_at < at);
                let tag = run_id.and_then(tag_of);
                tag.filter(|_| held_across).map(|tag| (until - now, tag))
            }
            _ => {
                state.mark_until = None;
                self.marking.store(false, Ordering::Release);
                None
            }
        }
    }

    /// Whether this client saw a change of the server (a restart, a
    /// failover) after `since`.
    pub(crate) fn changed_since(&self, since: Instant) -> bool {
        self.state().changed_at.is_some_and(|at| at >= since)
    }

    /// The tag of the server's `run_id` as this client knows it now (its
    /// first 64 bits): the value of a survival mark written after the last
    /// change. `None` before the identity was read.
    pub(crate) fn identity_tag(&self, slot: Option<u16>) -> Option<u64> {
        self.state().server(slot).1.and_then(tag_of)
    }

    /// Whether the server's identity (every primary's, on Redis Cluster)
    /// was read since the last (re)connection: until it is, nothing is
    /// granted there.
    /// The client's place life (see `Backend::place_life`).
    pub(crate) fn place_life(&self) -> Duration {
        self.settings.place_life
    }

    pub(crate) fn is_verified(&self) -> bool {
        self.verified.load(Ordering::Acquire)
    }

    /// Redis Cluster: whether the identity of the primary serving `slot`
    /// was read since the connections could have changed.
    pub(crate) fn is_node_verified(&self, slot: u16) -> bool {
        self.is_verified()
            || self
                .state()
                .cluster
                .as_ref()
                .and_then(|nodes| nodes.owner(slot))
                .is_some_and(|node| node.verified)
    }

    /// The connection was re-established (or broke): read the identity
    /// again before the next grant.
    pub(crate) fn unverify(&self) {
        self.verified.store(false, Ordering::Release);
    }

    /// The command connection broke (told synchronously by the connection
    /// manager, before it reconnects).
    pub(crate) fn disconnected(&self) {
        // Unchecked first, then numbered: whoever reads the new number
        // (before asking `is_verified`) sees the check cleared. On Redis
        // Cluster, which primary's connection broke is not told: all of
        // them are read again.
        self.unverify();
        let mut state = self.state();
        if let Some(nodes) = &mut state.cluster {
            nodes
                .nodes
                .iter_mut()
                .for_each(|node| node.verified = false);
        }
        // Under the state's lock: a check that read identities before this
        // disconnection (see `apply_cluster`) marks nothing checked.
        self.connections.fetch_add(1, Ordering::AcqRel);
        drop(state);
    }

    /// Which connection this is: changes with every disconnection, so a
    /// reply that arrives under another number may come from another server.
    pub(crate) fn connection_number(&self) -> u64 {
        self.connections.load(Ordering::Acquire)
    }

    /// The server(s), credentials redacted.
    #[cfg(feature = "cluster")]
    pub(crate) fn server(&self) -> &str {
        &self.server
    }

    /// The native conditional commands to use on this server now.
    pub(crate) fn offered(&self) -> &Offered {
        &self.offered
    }

    /// Announcements of a changed server, for the leases held there.
    pub(crate) fn changes(&self) -> watch::Receiver<ServerChange> {
        self.changes.subscribe()
    }

    /// Read the server's identity (at connect: `first`, or after a
    /// reconnection) and apply it. At connect, an evicting server is an
    /// error; later it refuses grants.
    pub(crate) async fn check<C: ConnectionLike>(
        &self,
        con: &mut C,
        first: bool,
    ) -> Result<(), LockError> {
        let info: Value = redis::cmd("INFO")
            .query_async(con)
            .await
            .map_err(|e| backend_error(&self.server, e))?;
        let identity = Identity::from_info(&info);
        self.apply(identity, first)?;
        self.verified.store(true, Ordering::Release);
        Ok(())
    }

    /// Read the identity of a server without applying it yet (a failover:
    /// the caller switches to that server, then calls
    /// [`failed_over`](Self::failed_over)).
    #[cfg(feature = "sentinel")]
    pub(crate) async fn identify<C: ConnectionLike>(
        &self,
        con: &mut C,
    ) -> Result<Identity, LockError> {
        let info: Value = redis::cmd("INFO")
            .query_async(con)
            .await
            .map_err(|e| backend_error(&self.server, e))?;
        Ok(Identity::from_info(&info))
    }

    /// The primary was replaced by the server `identity` describes (a
    /// Sentinel failover). Like a restart, with cause
    /// [`LostCause::FailedOver`]; and since a promoted replica's uptime says
    /// nothing about when it became primary, `restart_grace` counts from now.
    #[cfg(feature = "sentinel")]
    pub(crate) fn failed_over(&self, identity: Identity) -> Result<(), LockError> {
        let now = Instant::now();
        {
            let mut state = self.state();
            if !self.settings.restart_grace.is_zero() {
                state.young_until = later(state.young_until, now + self.settings.restart_grace);
            }
            // The new primary is another server: close as for a restart.
            state.close_asked(now, LostCause::FailedOver, |_| true);
            self.flag(&state);
        }
        self.apply_as(identity, false, LostCause::FailedOver)
    }

    /// A client that connects (through the sentinels) to a primary that
    /// has been primary for only `age`: with `restart_grace`, it grants
    /// nothing there until the grace has passed since then, as on a server
    /// that started `age` ago. A promoted replica's uptime is that of a
    /// server started long before the failover, and this client did not
    /// see the failover (a client that did counts the grace from it, see
    /// [`failed_over`](Self::failed_over)).
    #[cfg(feature = "sentinel")]
    pub(crate) fn primary_for(&self, age: Duration) {
        let grace = self.settings.restart_grace;
        if age < grace {
            let mut state = self.state();
            state.young_until = later(state.young_until, Instant::now() + (grace - age));
        }
    }

    /// Whether grants wait for `restart_grace` at all.
    #[cfg(feature = "sentinel")]
    pub(crate) fn has_restart_grace(&self) -> bool {
        !self.settings.restart_grace.is_zero()
    }

    fn apply(&self, identity: Identity, first: bool) -> Result<(), LockError> {
        self.apply_as(identity, first, LostCause::Restarted)
    }

    /// Refuse a server whose `maxmemory-policy` evicts lock keys, unless
    /// allowed: at connect (`first`) with an error, later by granting
    /// nothing there until the policy changes back.
    fn judge_eviction(
        &self,
        state: &mut State,
        policy: Option<&str>,
        first: bool,
    ) -> Result<(), LockError> {
        let Some(policy) = policy.filter(|p| evicts(p)) else {
            state.refused = None;
            return Ok(());
        };
        if self.settings.allow_eviction {
            if !state.warned_eviction {
                state.warned_eviction = true;
                tracing::warn!(server = %self.server, policy, "leasehold: the server may evict lock keys (allowed by allow_eviction(true)); a lock evicted under memory pressure can be granted twice");
            }
            return Ok(());
        }
        let what = if policy.starts_with("allkeys-") {
            "evicts any key, lock keys included"
        } else {
            "evicts keys that have a TTL, and every lock key has one"
        };
        let error = LockError::misconfigured(
            &self.server,
            format!(
                "the server has maxmemory-policy `{policy}`, which {what} under memory \
                 pressure, so a lock can be granted twice; set `maxmemory-policy noeviction` \
                 on this server (the only policy that never evicts a lock key), or accept \
                 the risk with LockClientBuilder::allow_eviction(true)"
            ),
        );
        if first {
            return Err(error);
        }
        tracing::error!(server = %self.server, policy, "leasehold: the server now evicts keys; refusing to grant locks there");
        state.refused = Some(error);
        Ok(())
    }

    fn apply_as(&self, identity: Identity, first: bool, cause: LostCause) -> Result<(), LockError> {
        if let Some(natives) = identity.natives.filter(|_| !self.settings.lua_only) {
            self.offered.learn(natives);
        }
        let now = Instant::now();
        let mut state = self.state();
        self.judge_eviction(&mut state, identity.policy.as_deref(), first)?;

        // `uptime_in_seconds` is whole seconds and may read up to 1 s
        // high: count one second less, the safe direction.
        if let Some(uptime) = identity
            .uptime
            .map(|u| u.saturating_sub(Duration::from_secs(1)))
            && uptime < self.settings.restart_grace
        {
            state.young_until = later(
                state.young_until,
                now + (self.settings.restart_grace - uptime),
            );
        }
        let restarted = match (&state.run_id, &identity.run_id) {
            (Some(known), Some(seen)) => known != seen,
            _ => false,
        };
        if restarted {
            let closed = state.close_asked(now, cause, |_| true);
            self.flag(&state);
            tracing::warn!(server = %self.server, closed, "leasehold: the server restarted (its run_id changed); leases held there are checked now, and keys asked for within their lease before it are not granted there until that lease could have run out");
        }
        if identity.run_id.is_some() {
            state.run_id = identity.run_id;
        }
        drop(state);
        if restarted {
            self.changes.send_modify(|change| {
                change.generation += 1;
                change.cause = cause;
            });
        }
        Ok(())
    }
}

#[cfg(feature = "cluster")]
impl Gate {
    /// Redis Cluster: apply what a check saw of the primaries (`seen`),
    /// and of those read together (`all`: the eviction policy and the
    /// native commands). A primary whose `run_id` changed restarted: the
    /// keys asked for in its slots are closed, and the change announced.
    /// Slots now served by a primary that took them over from one that is
    /// no primary any more were failed over (its replica may not have had
    /// the data): closed likewise, and with `restart_grace` the new
    /// primary grants nothing there for the grace, counted from now (its
    /// uptime says nothing about when it became primary). At connect
    /// (`first`), an evicting server is an error. A primary not read
    /// (`identity: None`) keeps its state; one read is marked checked
    /// unless a connection broke since `connection` (the
    /// [`connection_number`](Self::connection_number) before the reads).
    pub(crate) fn apply_cluster(
        &self,
        seen: Vec<Seen>,
        all: Identity,
        first: bool,
        connection: u64,
    ) -> Result<(), LockError> {
        if let Some(natives) = all.natives.filter(|_| !self.settings.lua_only) {
            self.offered.learn(natives);
        }
        let now = Instant::now();
        let grace = self.settings.restart_grace;
        let mut state = self.state();
        self.judge_eviction(&mut state, all.policy.as_deref(), first)?;
        let current = self.connection_number() == connection;
        let old = state.cluster.take().unwrap_or_default();
        let primaries: Vec<&str> = seen.iter().map(|s| s.id.as_str()).collect();
        let taken: Vec<Vec<(u16, u16)>> = seen
            .iter()
            .map(|s| {
                if first {
                    Vec::new()
                } else {
                    old.taken_over(&s.id, &s.slots, &primaries)
                }
            })
            .collect();
        let mut nodes = Nodes::default();
        let mut changes = Vec::new();
        for (seen, taken) in seen.into_iter().zip(taken) {
            let mut node = old
                .by_id(&seen.id)
                .cloned()
                .unwrap_or_else(|| Node::new(seen.id.clone()));
            if let Some(identity) = seen.identity {
                if let Some(uptime) = identity
                    .uptime
                    .map(|u| u.saturating_sub(Duration::from_secs(1)))
                    && uptime < grace
                {
                    node.young_until = later(node.young_until, now + (grace - uptime));
                }
                let restarted = matches!(
                    (&node.run_id, &identity.run_id),
                    (Some(known), Some(new)) if known != new
                );
                if restarted {
                    let closed =
                        state.close_asked(now, LostCause::Restarted, |s| within(&seen.slots, s));
                    node.changed_at = Some(now);
                    changes.push(LostCause::Restarted);
                    tracing::warn!(server = %self.server, node = %seen.id, closed, "leasehold: a cluster primary restarted (its run_id changed); leases held there are checked now, and keys asked for in its slots within their lease before it are not granted until that lease could have run out");
                }
                if identity.run_id.is_some() {
                    node.run_id = identity.run_id;
                }
                node.verified |= current;
            }
            if !taken.is_empty() {
                let closed = state.close_asked(now, LostCause::FailedOver, |s| within(&taken, s));
                if !grace.is_zero() {
                    node.young_until = later(node.young_until, now + grace);
                }
                node.changed_at = Some(now);
                changes.push(LostCause::FailedOver);
                tracing::warn!(server = %self.server, node = %seen.id, closed, "leasehold: a cluster primary took over slots of one that is no primary any more (a failover); leases held there are checked now, and keys asked for in those slots within their lease before it are not granted until that lease could have run out");
            }
            nodes.add(node, &seen.slots);
        }
        let all_verified = nodes.nodes.iter().all(|node| node.verified);
        state.cluster = Some(nodes);
        self.flag(&state);
        if all_verified && current {
            self.verified.store(true, Ordering::Release);
        }
        drop(state);
        for cause in changes {
            self.changes.send_modify(|change| {
                change.generation += 1;
                change.cause = cause;
            });
        }
        Ok(())
    }
}

impl State {
    /// When this client saw the server that holds `slot` change, and its
    /// `run_id`: the primary serving it on Redis Cluster.
    fn server(&self, slot: Option<u16>) -> (Option<Instant>, Option<&str>) {
        match (&self.cluster, slot) {
            (Some(nodes), Some(slot)) => nodes.owner(slot).map_or((None, None), |node| {
                (node.changed_at, node.run_id.as_deref())
            }),
            _ => (self.changed_at, self.run_id.as_deref()),
        }
    }

    /// `key`'s hash in `asks` and `closed`. Two keys with one hash (about
    /// one chance in 2^64 per pair) share their asks: a restart may then
    /// close one of them longer than its own leases need, never shorter.
    fn hash(&self, key: &str) -> u64 {
        self.hasher.hash_one(key)
    }

    /// Remember that the key hashed `hash` was asked for with a lease of
    /// `ttl` at `now`.
    fn remember(&mut self, hash: u64, slot: u16, ttl: Duration, now: Instant) {
        if let Some((_, asks)) = self.asks.get_mut(&hash) {
            asks.ask(ttl, now);
            return;
        }
        if self.asks.len() >= self.sweep_at {
            // Forget the asks whose leases have run out: they cannot be
            // held unseen by anyone now.
            self.asks.retain(|_, (_, asks)| asks.running(now));
            self.sweep_at = (self.asks.len() * 2).max(SWEEP_AT);
        }
        self.asks.insert(hash, (slot, Asks::One((ttl, now))));
    }

    /// A change at `now` of the server holding the slots `on` accepts:
    /// close every key asked for there with a lease that could still run,
    /// or in whose line a waiter of this client stands, until that lease
    /// could have run out counted from now. Returns how many keys are
    /// closed.
    fn close_asked(&mut self, now: Instant, cause: LostCause, on: impl Fn(u16) -> bool) -> usize {
        self.changed_at = later(self.changed_at, now);
        for (&hash, (slot, asks)) in &self.asks {
            if !on(*slot) {
                continue;
            }
            if let Some(lease) = asks.longest_running(now) {
                close(&mut self.closed, hash, now + lease, cause);
            }
        }
        for (&hash, (slot, standing)) in &self.standing {
            if let (true, Some(lease)) = (on(*slot), standing.longest()) {
                close(&mut self.closed, hash, now + lease, cause);
            }
        }
        self.closed.retain(|_, &mut (until, _)| until > now);
        // Peers that saw the change close their keys about as long.
        if let Some(&(last, _)) = self.closed.values().max_by_key(|(until, _)| *until) {
            self.mark_until = later(self.mark_until, last);
        }
        self.closed.len()
    }
}

/// Close the key hashed `hash` until `until` at least.
fn close(
    closed: &mut HashMap<u64, (Instant, LostCause), KeyHash>,
    hash: u64,
    until: Instant,
    cause: LostCause,
) {
    let entry = closed.entry(hash).or_insert((until, cause));
    if entry.0 < until {
        *entry = (until, cause);
    }
}

/// A `run_id`'s tag: its first 16 hex digits (a run id is 40 random hex
/// digits, new at every start of a server process).
fn tag_of(run_id: &str) -> Option<u64> {
    u64::from_str_radix(run_id.get(..16)?, 16).ok()
}

fn later(a: Option<Instant>, b: Instant) -> Option<Instant> {
    Some(a.map_or(b, |a| a.max(b)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_identity_and_eviction_policies() {
        let info = Value::BulkString(
            b"# Server\r\nrun_id:abc\r\nuptime_in_seconds:7\r\n# Memory\r\nmaxmemory_policy:allkeys-lru\r\n"
                .to_vec(),
        );
        let identity = Identity::from_info(&info);
        assert_eq!(identity.run_id.as_deref(), Some("abc"));
        assert_eq!(identity.uptime, Some(Duration::from_secs(7)));
        assert_eq!(identity.policy.as_deref(), Some("allkeys-lru"));
        assert!(evicts("volatile-ttl") && evicts("allkeys-random"));
        assert!(!evicts("noeviction"));
    }

    #[test]
    fn an_evicting_server_is_refused_at_connect_unless_allowed() {
        let identity = || Identity {
            policy: Some("volatile-lru".into()),
            ..Identity::default()
        };
        let strict = Gate::new("redis://h", GateSettings::default());
        let err = strict.apply(identity(), true).unwrap_err();
        assert!(err.to_string().contains("volatile-lru"), "{err}");
        let lenient = Gate::new(
            "redis://h",
            GateSettings {
                allow_eviction: true,
                ..GateSettings::default()
            },
        );
        assert!(lenient.apply(identity(), true).is_ok());
    }

    fn restarted(gate: &Gate, run_id: &str) {
        let identity = Identity {
            run_id: Some(run_id.into()),
            ..Identity::default()
        };
        assert!(gate.apply(identity, false).is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn a_restart_closes_only_the_keys_asked_for_within_their_lease() {
        let gate = Gate::new("redis://h", GateSettings::default());
        restarted(&gate, "a");
        let hour = Duration::from_secs(3600);
        // Asked for an hour an hour and a half ago: that lease has run out.
        assert_eq!(gate.admit("old", None, hour), Ok(Admission::Open));
        tokio::time::advance(Duration::from_secs(5400)).await;
        assert_eq!(
            gate.admit("recent", None, Duration::from_secs(10)),
            Ok(Admission::Open)
        );
        tokio::time::advance(Duration::from_secs(4)).await;
        restarted(&gate, "b");

        assert_eq!(
            gate.admit("old", None, hour),
            Ok(Admission::Open),
            "a lease that ran out long ago closes nothing"
        );
        assert_eq!(
            gate.admit("never", None, hour),
            Ok(Admission::Open),
            "a key not asked for stays open"
        );
        let Ok(Admission::Check(error)) = gate.admit("recent", None, Duration::from_secs(10))
        else {
            panic!("the key asked for 4 s before the restart must be closed");
        };
        assert!(error.is_unavailable() && !error.is_busy(), "{error}");
        assert_eq!(error.retry_after(), Some(Duration::from_secs(10)));
        assert!(error.to_string().contains("restarted"), "{error}");

        // Its state survived: open at once.
        gate.survived("recent");
        assert_eq!(
            gate.admit("recent", None, Duration::from_secs(10)),
            Ok(Admission::Open)
        );
    }

    /// A waiter in line asks for its key all the while: its last attempt
    /// (here 5 s before the restart, with a 1 s lease) does not let the
    /// key open; once it left the line, only its asks count again.
    #[tokio::test(start_paused = true)]
    async fn a_key_with_a_waiter_in_line_is_closed_whatever_its_last_attempt() {
        let gate = Gate::new("redis://h", GateSettings::default());
        restarted(&gate, "a");
        let lease = Duration::from_secs(1);
        assert_eq!(gate.admit("waited", None, lease), Ok(Admission::Open));
        assert_eq!(gate.admit("left", None, lease), Ok(Admission::Open));
        gate.stand("waited", None, lease, true);
        gate.stand("left", None, lease, true);
        gate.stand("left", None, lease, false);
        tokio::time::advance(Duration::from_secs(5)).await;
        restarted(&gate, "b");
        let Ok(Admission::Check(error)) = gate.admit("waited", None, lease) else {
            panic!("a key with a waiter in line must be closed after a restart");
        };
        assert_eq!(error.retry_after(), Some(lease));
        assert_eq!(
            gate.admit("left", None, lease),
            Ok(Admission::Open),
            "a waiter that left asks no more"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_closed_key_reopens_when_its_longest_lease_could_have_run_out() {
        let gate = Gate::new("redis://h", GateSettings::default());
        restarted(&gate, "a");
        assert_eq!(
            gate.admit("k", None, Duration::from_secs(30)),
            Ok(Admission::Open)
        );
        assert_eq!(
            gate.admit("k", None, Duration::from_secs(2)),
            Ok(Admission::Open)
        );
        restarted(&gate, "b");
        tokio::time::advance(Duration::from_secs(29)).await;
        assert!(matches!(
            gate.admit("k", None, Duration::from_secs(2)),
            Ok(Admission::Check(_))
        ));
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(
            gate.admit("k", None, Duration::from_secs(2)),
            Ok(Admission::Open)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_key_asked_with_two_leases_is_closed_by_the_one_still_running() {
        let gate = Gate::new("redis://h", GateSettings::default());
        restarted(&gate, "a");
        assert_eq!(
            gate.admit("k", None, Duration::from_secs(30)),
            Ok(Admission::Open)
        );
        tokio::time::advance(Duration::from_secs(29)).await;
        assert_eq!(
            gate.admit("k", None, Duration::from_secs(2)),
            Ok(Admission::Open)
        );
        tokio::time::advance(Duration::from_secs(1)).await;
        // The 30 s lease has just run out; the 2 s one runs another second:
        // closed for its 2 s, not for 30.
        restarted(&gate, "b");
        let Ok(Admission::Check(error)) = gate.admit("k", None, Duration::from_secs(2)) else {
            panic!("the key asked for 2 s a second before the restart must be closed");
        };
        assert_eq!(error.retry_after(), Some(Duration::from_secs(2)));
        tokio::time::advance(Duration::from_secs(2)).await;
        assert_eq!(
            gate.admit("k", None, Duration::from_secs(2)),
            Ok(Admission::Open)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_young_server_is_closed_for_every_key_until_the_grace_passed() {
        let gate = Gate::new(
            "redis://h",
            GateSettings {
                restart_grace: Duration::from_secs(10),
                ..GateSettings::default()
            },
        );
        let identity = Identity {
            run_id: Some("a".into()),
            uptime: Some(Duration::from_secs(4)),
            policy: None,
            natives: None,
        };
        assert!(gate.apply(identity, true).is_ok());
        let Ok(Admission::Closed(error)) = gate.admit("any", None, Duration::from_secs(1)) else {
            panic!("a young server grants nothing");
        };
        assert_eq!(error.retry_after(), Some(Duration::from_secs(7)));
        tokio::time::advance(Duration::from_secs(7)).await;
        assert_eq!(
            gate.admit("any", None, Duration::from_secs(1)),
            Ok(Admission::Open)
        );
    }

    #[cfg(feature = "cluster")]
    fn primary(id: &str, slots: (u16, u16), run_id: &str, uptime: u64) -> Seen {
        Seen {
            id: id.into(),
            slots: vec![slots],
            identity: Some(Identity {
                run_id: Some(run_id.into()),
                uptime: Some(Duration::from_secs(uptime)),
                policy: None,
                natives: None,
            }),
        }
    }

    /// Redis Cluster: a primary that restarts closes only the keys asked
    /// for in its slots, and its youth refuses grants there only; slots
    /// taken over from a primary that is gone are a failover of those
    /// slots, with the grace counted from then.
    #[cfg(feature = "cluster")]
    #[tokio::test(start_paused = true)]
    async fn a_cluster_primary_changes_alone() {
        let gate = Gate::new_cluster(
            "cluster[h]",
            GateSettings {
                restart_grace: Duration::from_secs(10),
                ..GateSettings::default()
            },
        );
        let mut changes = gate.changes();
        let apply = |seen: Vec<Seen>| {
            let connection = gate.connection_number();
            assert!(
                gate.apply_cluster(seen, Identity::default(), false, connection)
                    .is_ok()
            );
        };
        apply(vec![
            primary("a", (0, 99), "a100000000000000", 100),
            primary("b", (100, 199), "b100000000000000", 100),
        ]);
        assert!(gate.is_verified());
        let lease = Duration::from_secs(30);
        assert_eq!(gate.admit("on-a", Some(5), lease), Ok(Admission::Open));
        assert_eq!(gate.admit("on-b", Some(150), lease), Ok(Admission::Open));

        // a restarts empty, 3 s ago.
        gate.disconnected();
        assert!(!gate.is_node_verified(5) && !gate.is_node_verified(150));
        apply(vec![
            primary("a", (0, 99), "a200000000000000", 3),
            primary("b", (100, 199), "b100000000000000", 100),
        ]);
        assert!(
            changes.has_changed().unwrap_or(false),
            "the restart is announced"
        );
        assert_eq!(changes.borrow_and_update().cause, LostCause::Restarted);
        let Ok(Admission::Closed(young)) = gate.admit("other-on-a", Some(6), lease) else {
            panic!("a primary younger than the grace grants nothing");
        };
        assert!(
            young
                .retry_after()
                .is_some_and(|d| d <= Duration::from_secs(8))
        );
        assert_eq!(
            gate.admit("on-b", Some(150), lease),
            Ok(Admission::Open),
            "b neither restarted nor is young"
        );
        tokio::time::advance(Duration::from_secs(8)).await;
        assert!(
            matches!(gate.admit("on-a", Some(5), lease), Ok(Admission::Check(_))),
            "the key asked for on a is closed for its lease"
        );
        assert_eq!(
            gate.admit("other-on-a", Some(6), lease),
            Ok(Admission::Open)
        );

        // b's slots taken over by c (b is no primary any more): a failover.
        apply(vec![
            primary("a", (0, 99), "a200000000000000", 20),
            primary("c", (100, 199), "c100000000000000", 500),
        ]);
        assert_eq!(changes.borrow_and_update().cause, LostCause::FailedOver);
        let Ok(Admission::Closed(young)) = gate.admit("fresh-on-c", Some(120), lease) else {
            panic!("a promoted replica grants nothing for the grace");
        };
        assert_eq!(young.retry_after(), Some(Duration::from_secs(10)));
        assert_eq!(
            gate.admit("fresh-on-a", Some(7), lease),
            Ok(Admission::Open)
        );
        // Survival marks name each primary's own process.
        assert_eq!(gate.identity_tag(Some(5)), Some(0xa200_0000_0000_0000));
        assert_eq!(gate.identity_tag(Some(120)), Some(0xc100_0000_0000_0000));
    }
}
