//! The gate: what this client knows of a server's identity, and whether it
//! may grant locks there now (SPEC 13, "data loss is detected, not
//! trusted").
//!
//! - **Eviction.** A server whose `maxmemory-policy` can evict keys
//!   (`allkeys-*`, `volatile-*`: lock keys have TTLs) could drop a held lock
//!   under memory pressure and let a second holder in. It is refused at
//!   connect (and locks are refused if it turns up on a reconnect), unless
//!   the client allows eviction, which then only warns once.
//! - **Restarts.** The server's `run_id` is read at connect and after every
//!   reconnection. A changed `run_id` means a restarted (or replaced) server:
//!   it may have lost every lock. The gate then closes until the longest
//!   lease this client has issued could have run out, and announces the
//!   change so that held leases are checked at once.
//! - **Restart grace.** With `restart_grace(d)`, a server whose uptime is
//!   below `d` grants nothing until it is `d` old: this covers clients that
//!   never saw the restart (they connected afterwards).
//!
//! Read with `INFO` (not `CONFIG GET`, which managed services often disable).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use redis::Value;
use redis::aio::ConnectionLike;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::backend::connect::backend_error;
use crate::backend::{Acquired, ServerChange};
use crate::error::{LockError, LostCause};

/// What the client was told about eviction and restarts.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct GatePolicy {
    pub(crate) restart_grace: Duration,
    pub(crate) allow_eviction: bool,
}

pub(crate) struct Gate {
    server: String,
    policy: GatePolicy,
    state: Mutex<State>,
    /// The longest lease issued through this client, in ms.
    longest_lease: AtomicU64,
    /// The server's identity was read on the current connection.
    verified: AtomicBool,
    /// Counts the disconnections of the command connection.
    connections: AtomicU64,
    changes: watch::Sender<ServerChange>,
}

#[derive(Default)]
struct State {
    run_id: Option<String>,
    /// No grants before this instant.
    closed_until: Option<Instant>,
    /// Grants refused outright (an evicting server seen on a reconnect).
    refused: Option<LockError>,
    warned_eviction: bool,
}

/// What `INFO` says that matters here.
#[derive(Debug, Default)]
pub(crate) struct Identity {
    run_id: Option<String>,
    uptime: Option<Duration>,
    policy: Option<String>,
}

impl Gate {
    pub(crate) fn new(server: &str, policy: GatePolicy) -> Gate {
        Gate {
            server: server.to_owned(),
            policy,
            state: Mutex::default(),
            longest_lease: AtomicU64::new(0),
            verified: AtomicBool::new(false),
            connections: AtomicU64::new(0),
            changes: watch::channel(ServerChange::default()).0,
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // Every update is a handful of field writes that cannot panic.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Remember that a lease of `ttl` may be granted through this client.
    pub(crate) fn issued(&self, ttl: Duration) {
        let ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX);
        self.longest_lease.fetch_max(ms, Ordering::Relaxed);
    }

    /// Whether grants are held back now: `Some(Busy)` with the time left
    /// while closed, an error when refused, `None` when open.
    pub(crate) fn closed(&self, key: &str) -> Result<Option<Acquired>, LockError> {
        let mut state = self.state();
        if let Some(refused) = &state.refused {
            return Err(refused.clone().with_key(key));
        }
        match state.closed_until {
            Some(until) => {
                let now = Instant::now();
                if now < until {
                    Ok(Some(Acquired::Busy {
                        expires_in: Some(until - now),
                    }))
                } else {
                    state.closed_until = None;
                    Ok(None)
                }
            }
            None => Ok(None),
        }
    }

    /// Whether the server's identity was read since the last (re)connection:
    /// until it is, nothing is granted there.
    pub(crate) fn is_verified(&self) -> bool {
        self.verified.load(Ordering::Acquire)
    }

    /// The connection was re-established (or broke): read the identity
    /// again before the next grant.
    pub(crate) fn unverify(&self) {
        self.verified.store(false, Ordering::Release);
    }

    /// The command connection broke (told synchronously by the connection
    /// manager, before it reconnects).
    pub(crate) fn disconnected(&self) {
        self.connections.fetch_add(1, Ordering::AcqRel);
        self.unverify();
    }

    /// Which connection this is: changes with every disconnection, so a
    /// reply that arrives under another number may come from another server.
    pub(crate) fn connection_number(&self) -> u64 {
        self.connections.load(Ordering::Acquire)
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
        let grace = Instant::now() + self.policy.restart_grace;
        {
            let mut state = self.state();
            state.closed_until = Some(state.closed_until.map_or(grace, |c| c.max(grace)));
        }
        self.apply_as(identity, false, LostCause::FailedOver)
    }

    fn apply(&self, identity: Identity, first: bool) -> Result<(), LockError> {
        self.apply_as(identity, first, LostCause::Restarted)
    }

    fn apply_as(&self, identity: Identity, first: bool, cause: LostCause) -> Result<(), LockError> {
        let now = Instant::now();
        let mut state = self.state();
        if let Some(policy) = identity.policy.as_deref().filter(|p| evicts(p)) {
            if self.policy.allow_eviction {
                if !state.warned_eviction {
                    state.warned_eviction = true;
                    tracing::warn!(server = %self.server, policy, "leasehold: the server may evict lock keys (allowed by allow_eviction(true)); a lock evicted under memory pressure can be granted twice");
                }
            } else {
                let error = LockError::invalid(
                    "server",
                    format!(
                        "{} has maxmemory-policy `{policy}`, which can evict lock keys and grant a lock twice; \
                         use `noeviction` (or an `allkeys-*`-free policy), or allow it with \
                         LockClientBuilder::allow_eviction(true)",
                        self.server
                    ),
                );
                if first {
                    return Err(error);
                }
                tracing::error!(server = %self.server, policy, "leasehold: the server now evicts keys; refusing to grant locks there");
                state.refused = Some(error);
            }
        } else {
            state.refused = None;
        }

        let mut closed_until = state.closed_until;
        let mut close = |until: Instant| {
            closed_until = Some(closed_until.map_or(until, |c: Instant| c.max(until)));
        };
        // `uptime_in_seconds` is whole seconds and may read up to 1 s
        // high: count one second less, the safe direction.
        if let Some(uptime) = identity
            .uptime
            .map(|u| u.saturating_sub(Duration::from_secs(1)))
            && uptime < self.policy.restart_grace
        {
            close(now + (self.policy.restart_grace - uptime));
        }
        let restarted = match (&state.run_id, &identity.run_id) {
            (Some(known), Some(seen)) => known != seen,
            _ => false,
        };
        if restarted {
            let longest = Duration::from_millis(self.longest_lease.load(Ordering::Relaxed));
            close(now + longest);
            tracing::warn!(server = %self.server, "leasehold: the server restarted (its run_id changed); leases held there are checked now, and no lock is granted there for {longest:?}");
        }
        state.closed_until = closed_until;
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

/// Whether a `maxmemory-policy` can evict keys that have a TTL.
fn evicts(policy: &str) -> bool {
    policy.starts_with("allkeys-") || policy.starts_with("volatile-")
}

impl Identity {
    /// From an `INFO` reply: one server's text, or (Cluster) one per node,
    /// in which case the most restrictive wins.
    fn from_info(info: &Value) -> Identity {
        let mut identity = Identity::default();
        let mut texts = Vec::new();
        collect_texts(info, &mut texts);
        for text in texts {
            for line in text.lines() {
                let Some((field, value)) = line.trim().split_once(':') else {
                    continue;
                };
                match field {
                    "run_id" => identity.run_id = Some(value.to_owned()),
                    "uptime_in_seconds" => {
                        let uptime = value.parse().ok().map(Duration::from_secs);
                        identity.uptime = match (identity.uptime, uptime) {
                            (Some(a), Some(b)) => Some(a.min(b)),
                            (a, b) => a.or(b),
                        };
                    }
                    "maxmemory_policy" if identity.policy.as_deref().is_none_or(|p| !evicts(p)) => {
                        identity.policy = Some(value.to_owned());
                    }
                    _ => {}
                }
            }
        }
        identity
    }
}

fn collect_texts(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::BulkString(bytes) => out.push(String::from_utf8_lossy(bytes).into_owned()),
        Value::SimpleString(text) => out.push(text.clone()),
        Value::VerbatimString { text, .. } => out.push(text.clone()),
        Value::Array(items) | Value::Set(items) => {
            items.iter().for_each(|item| collect_texts(item, out));
        }
        Value::Map(pairs) => pairs.iter().for_each(|(_, v)| collect_texts(v, out)),
        _ => {}
    }
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
        let strict = Gate::new("redis://h", GatePolicy::default());
        let err = strict.apply(identity(), true).unwrap_err();
        assert!(err.to_string().contains("volatile-lru"), "{err}");
        let lenient = Gate::new(
            "redis://h",
            GatePolicy {
                allow_eviction: true,
                ..GatePolicy::default()
            },
        );
        assert!(lenient.apply(identity(), true).is_ok());
    }
}
