//! Redis Cluster: the node connections of the command connection, which
//! report a slot that changed hands without a connection breaking.
//!
//! A failover can leave every connection of a client open: `CLUSTER
//! FAILOVER` (or a partition that heals) turns the old primary into a
//! replica that still answers, with `MOVED` (or `READONLY` for a write),
//! and redis-rs follows the redirect by itself, to the promoted node,
//! which may lack the leases the old one held. A broken connection is
//! reported to the gate by a push (see `cluster.rs`); a redirect has no
//! push. So each node connection is wrapped: a reply that says the slot's
//! owner changed is reported *before* redis-rs sends the command again,
//! as a disconnection of the gate (every primary read again). An
//! acquisition granted after the redirect then comes back under a new
//! connection number, and is admitted again once the primary that granted
//! it was read (see `acquire.rs`, `settle`).
//!
//! redis-rs opens these connections itself, through a `Connect` impl that
//! gets no state: the report goes to every Cluster client of the process
//! (a registry of their gates). A redirect is rare (a failover, a slot's
//! migration); a needless report costs each client one read of its
//! primaries, nothing on the path of an acquisition.

use std::sync::{Arc, Mutex, PoisonError, Weak};

use futures_util::FutureExt;
use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::cluster_async::Connect;
use redis::{
    AsyncConnectionConfig, Cmd, IntoConnectionInfo, Pipeline, RedisError, RedisFuture, RedisResult,
    ServerErrorKind, Value,
};
use tokio::sync::Notify;

use super::gate::Gate;

/// The gates of the live Cluster clients of this process, each with the
/// signal of its background check of the primaries.
static WATCHERS: Mutex<Vec<(Weak<Gate>, Weak<Notify>)>> = Mutex::new(Vec::new());

/// Report redirects to `gate` (and wake `recheck`) from now on, until the
/// gate is dropped.
pub(super) fn watch(gate: &Arc<Gate>, recheck: &Arc<Notify>) {
    let mut watchers = WATCHERS.lock().unwrap_or_else(PoisonError::into_inner);
    watchers.retain(|(gate, _)| gate.strong_count() > 0);
    watchers.push((Arc::downgrade(gate), Arc::downgrade(recheck)));
}

/// A slot changed hands: every Cluster client reads its primaries again,
/// and a grant in flight is admitted again.
fn redirected() {
    let watchers = WATCHERS.lock().unwrap_or_else(PoisonError::into_inner);
    for (gate, recheck) in watchers.iter() {
        if let (Some(gate), Some(recheck)) = (gate.upgrade(), recheck.upgrade()) {
            tracing::debug!(
                server = gate.server(),
                "leasehold: a slot changed hands (MOVED or READONLY); reading the primaries again"
            );
            gate.disconnected();
            recheck.notify_one();
        }
    }
}

/// Whether a server's reply says that the slot is served elsewhere now.
fn changed_hands(kind: Option<ServerErrorKind>) -> bool {
    matches!(
        kind,
        Some(ServerErrorKind::Moved | ServerErrorKind::ReadOnly)
    )
}

fn value_changed_hands(value: &Value) -> bool {
    match value {
        Value::ServerError(error) => changed_hands(error.kind()),
        _ => false,
    }
}

fn error_changed_hands(error: &RedisError) -> bool {
    match error.kind() {
        redis::ErrorKind::Server(kind) => changed_hands(Some(kind)),
        _ => false,
    }
}

/// A reply of one command: a `MOVED` or `READONLY`, as a value or an error.
fn says_changed_hands(reply: &RedisResult<Value>) -> bool {
    match reply {
        Ok(value) => value_changed_hands(value),
        Err(error) => error_changed_hands(error),
    }
}

/// A node connection that reports redirects (see the module docs).
#[derive(Clone)]
pub(crate) struct Watched(MultiplexedConnection);

impl ConnectionLike for Watched {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        async move {
            let reply = self.0.req_packed_command(cmd).await;
            if says_changed_hands(&reply) {
                redirected();
            }
            reply
        }
        .boxed()
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        async move {
            let reply = self.0.req_packed_commands(cmd, offset, count).await;
            let changed = match &reply {
                Ok(values) => values.iter().any(value_changed_hands),
                Err(error) => error_changed_hands(error),
            };
            if changed {
                redirected();
            }
            reply
        }
        .boxed()
    }

    fn get_db(&self) -> i64 {
        self.0.get_db()
    }
}

impl Connect for Watched {
    fn connect_with_config<'a, T>(info: T, config: AsyncConnectionConfig) -> RedisFuture<'a, Self>
    where
        T: IntoConnectionInfo + Send + 'a,
    {
        MultiplexedConnection::connect_with_config(info, config)
            .map(|connected| connected.map(Watched))
            .boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn moved_and_readonly_replies_are_redirects_ask_is_not() {
        let parse = |reply: &[u8]| redis::parse_redis_value(reply);
        let moved = parse(b"-MOVED 3999 127.0.0.1:6381\r\n");
        let readonly = parse(b"-READONLY You can't write against a read only replica.\r\n");
        let ask = parse(b"-ASK 3999 127.0.0.1:6381\r\n");
        let busy = parse(b"$4\r\nbusy\r\n");
        assert!(says_changed_hands(&moved), "{moved:?}");
        assert!(says_changed_hands(&readonly), "{readonly:?}");
        assert!(!says_changed_hands(&ask), "{ask:?}");
        assert!(!says_changed_hands(&busy), "{busy:?}");
    }
}
