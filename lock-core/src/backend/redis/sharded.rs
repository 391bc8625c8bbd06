//! Release announcements on Redis Cluster: sharded pub/sub (`SSUBSCRIBE`,
//! Redis ≥ 7) or plain pub/sub on older servers, for the listener.
//!
//! When a slot moves, its old owner drops the sharded subscriptions of that
//! slot (a server-sent `SUNSUBSCRIBE`); when its owner dies and a replica is
//! promoted, nothing is sent at all. [`follow_moved_subscriptions`] handles
//! both: it subscribes again on the new owner and wakes that lock's first
//! waiter, which may have missed a release in between.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use redis::cluster_async::ClusterConnection;
use redis::{PushInfo, PushKind, RedisResult, Value};
use tokio::sync::mpsc;

use crate::backend::BoxFuture;
use crate::backend::listener::PubSubConnection;
use crate::backend::wakeups::Wakeups;

/// The release channels the listener wants to be subscribed to.
/// How often the listener looks at the slot map while it has waiters.
const OWNER_CHECK: Duration = Duration::from_secs(1);

pub(super) type Wanted = Arc<Mutex<HashSet<String>>>;

fn lock_wanted(wanted: &Wanted) -> MutexGuard<'_, HashSet<String>> {
    // Every update is a single insert or remove.
    wanted.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The listener's connection: sharded pub/sub where the servers have it.
pub(super) struct ClusterPubSub {
    conn: ClusterConnection,
    sharded: bool,
    wanted: Wanted,
}

impl ClusterPubSub {
    pub(super) fn new(conn: ClusterConnection, sharded: bool, wanted: Wanted) -> ClusterPubSub {
        ClusterPubSub {
            conn,
            sharded,
            wanted,
        }
    }
}

impl PubSubConnection for ClusterPubSub {
    fn subscribe<'a>(&'a mut self, channel: &'a str) -> BoxFuture<'a, RedisResult<()>> {
        Box::pin(async move {
            lock_wanted(&self.wanted).insert(channel.to_owned());
            let result = if self.sharded {
                self.conn.ssubscribe(channel).await
            } else {
                self.conn.subscribe(channel).await
            };
            if result.is_err() {
                lock_wanted(&self.wanted).remove(channel);
            }
            result
        })
    }

    fn unsubscribe<'a>(&'a mut self, channel: &'a str) -> BoxFuture<'a, RedisResult<()>> {
        Box::pin(async move {
            lock_wanted(&self.wanted).remove(channel);
            if self.sharded {
                self.conn.sunsubscribe(channel).await
            } else {
                self.conn.unsubscribe(channel).await
            }
        })
    }
}

/// Pass pushes on to the listener until either side is gone.
pub(super) async fn forward(
    mut from: mpsc::UnboundedReceiver<PushInfo>,
    to: mpsc::UnboundedSender<PushInfo>,
) {
    loop {
        tokio::select! {
            push = from.recv() => match push {
                Some(push) => if to.send(push).is_err() { return },
                None => return,
            },
            () = to.closed() => return,
        }
    }
}

/// Like [`forward`], and keeps the listener's sharded subscriptions on the
/// nodes that own their slots:
///
/// - when a node drops a sharded subscription the listener still wants (the
///   slot moved away from it: a server-sent `SUNSUBSCRIBE`), subscribe again
///   (the cluster connection follows the `MOVED` to the new owner);
/// - while it wants any, look at the slot map every [`OWNER_CHECK`]: a node
///   that died sends nothing, so a slot whose owner changed (a failover) is
///   found this way, and its channels are subscribed again on the new owner.
///
/// Either way the first waiter of that lock is woken, since a release may
/// have gone by unheard. Holds a clone of the listener's connection, so it
/// must end with the listener: it does when the listener's push receiver is
/// dropped.
pub(super) async fn follow_moved_subscriptions(
    mut from: mpsc::UnboundedReceiver<PushInfo>,
    to: mpsc::UnboundedSender<PushInfo>,
    mut conn: ClusterConnection,
    wanted: Wanted,
    wakeups: Arc<Wakeups>,
) {
    let mut owners: HashMap<String, String> = HashMap::new();
    let mut check = tokio::time::interval(OWNER_CHECK);
    check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let push = tokio::select! {
            push = from.recv() => match push {
                Some(push) => push,
                None => return,
            },
            () = to.closed() => return,
            _ = check.tick() => {
                follow_owners(&mut conn, &wanted, &wakeups, &mut owners).await;
                continue;
            }
        };
        if push.kind == PushKind::SUnsubscribe
            && let Some(Value::BulkString(channel)) = push.data.first()
            && let Ok(channel) = std::str::from_utf8(channel)
            && lock_wanted(&wanted).contains(channel)
        {
            let channel = channel.to_owned();
            tracing::debug!(
                channel,
                "leasehold: sharded subscription dropped; resubscribing"
            );
            resubscribe(&mut conn, &wakeups, &channel).await;
        }
        if to.send(push).is_err() {
            return;
        }
    }
}

/// Subscribe to `channel` again, and wake its first waiter.
async fn resubscribe(conn: &mut ClusterConnection, wakeups: &Wakeups, channel: &str) {
    if let Err(e) = conn.ssubscribe(channel).await {
        tracing::debug!(channel, error = %e, "leasehold: resubscribe failed");
    }
    // A release may have gone by unheard.
    wakeups.wake_first(channel);
}

/// Compare the owners of the wanted channels' slots with the last look;
/// resubscribe where they changed.
async fn follow_owners(
    conn: &mut ClusterConnection,
    wanted: &Wanted,
    wakeups: &Wakeups,
    owners: &mut HashMap<String, String>,
) {
    let channels: Vec<String> = lock_wanted(wanted).iter().cloned().collect();
    owners.retain(|channel, _| channels.contains(channel));
    if channels.is_empty() {
        return;
    }
    let slots: Value = match redis::cmd("CLUSTER").arg("SLOTS").query_async(conn).await {
        Ok(slots) => slots,
        Err(e) => {
            tracing::debug!(error = %e, "leasehold: could not read the slot map");
            return;
        }
    };
    let map = slot_owners(&slots);
    for channel in channels {
        let slot = key_slot(channel.as_bytes());
        let Some(owner) = map
            .iter()
            .find(|(start, end, _)| (*start..=*end).contains(&slot))
            .map(|(_, _, owner)| owner.clone())
        else {
            continue;
        };
        match owners.insert(channel.clone(), owner.clone()) {
            Some(before) if before != owner => {
                tracing::debug!(channel, %before, %owner, "leasehold: the slot's owner changed; resubscribing");
                resubscribe(conn, wakeups, &channel).await;
            }
            _ => {}
        }
    }
}

/// The cluster slot of a key: CRC16 (XMODEM) of its hash tag (or of the
/// whole key without one), modulo 16384.
fn key_slot(key: &[u8]) -> u16 {
    let tagged = key
        .iter()
        .position(|&b| b == b'{')
        .and_then(|open| {
            let rest = &key[open + 1..];
            rest.iter()
                .position(|&b| b == b'}')
                .filter(|&close| close > 0)
                .map(|close| &rest[..close])
        })
        .unwrap_or(key);
    let mut crc: u16 = 0;
    for &byte in tagged {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc % 16384
}

/// `CLUSTER SLOTS` as (first slot, last slot, "host:port" of the primary).
fn slot_owners(reply: &Value) -> Vec<(u16, u16, String)> {
    let Value::Array(ranges) = reply else {
        return Vec::new();
    };
    ranges
        .iter()
        .filter_map(|range| {
            let Value::Array(fields) = range else {
                return None;
            };
            let int = |v: &Value| match v {
                Value::Int(i) => u16::try_from(*i).ok(),
                _ => None,
            };
            let (start, end) = (int(fields.first()?)?, int(fields.get(1)?)?);
            let Value::Array(node) = fields.get(2)? else {
                return None;
            };
            let host = match node.first()? {
                Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
                Value::SimpleString(s) => s.clone(),
                _ => return None,
            };
            let port = match node.get(1)? {
                Value::Int(p) => *p,
                _ => return None,
            };
            Some((start, end, format!("{host}:{port}")))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_follow_the_hash_tag() {
        // Known values: CRC16 of "123456789" is 0x31C3.
        assert_eq!(key_slot(b"123456789"), 0x31C3);
        assert_eq!(key_slot(b"leasehold:{a}:released"), key_slot(b"a"));
        // As `CLUSTER KEYSLOT` answers.
        assert_eq!(key_slot(b"foo"), 12182);
        assert_eq!(key_slot(b"bar"), 5061);
    }
}
