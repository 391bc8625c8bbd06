//! README, Guarantees: on Redis Cluster, waiters still wake
//! on release after a failover, and a release during a slot migration is
//! retried until it lands.

use std::sync::Arc;
use std::time::Duration;

use leasehold::LockClient;
use redis::Value;
use tokio::time::Instant;

use crate::common::{channel_name, eventually, int, lock_name};
use crate::support::{RedisCluster, RedisServer};

fn slot_of(key: &str) -> u16 {
    RedisCluster::key_slot(&lock_name(key))
}

async fn client(urls: Vec<String>) -> LockClient {
    LockClient::connect_cluster(urls)
        .await
        .expect("connect to the test cluster")
}

/// `EXISTS` on a replica (after `READONLY`).
fn exists_on_replica(replica: &RedisServer, key: &str) -> bool {
    let Ok(mut con) = replica.connection() else {
        return false;
    };
    let _ = redis::cmd("READONLY").query::<()>(&mut con);
    redis::cmd("EXISTS")
        .arg(key)
        .query::<i64>(&mut con)
        .unwrap_or(0)
        == 1
}

/// Sharded subscribers of `key`'s release channel on `node`.
fn shard_subscribers(node: &RedisServer, key: &str) -> i64 {
    match node.cmd(&["PUBSUB", "SHARDNUMSUB", &channel_name(key)]) {
        Value::Array(items) => items.get(1).map(int).unwrap_or(0),
        other => panic!("PUBSUB SHARDNUMSUB: unexpected {other:?}"),
    }
}

/// #14: the master owning the lock dies and its replica takes over; the
/// lease survives there, and a waiter in another client is still woken
/// by the holder's release (not by the lease running out).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_still_wakes_on_release_after_a_failover() {
    let key = "failing-over";
    let mut cluster = tokio::task::spawn_blocking(move || {
        let mut cluster = RedisCluster::start(3);
        let master = cluster.node_for_slot(slot_of(key));
        let replica = cluster.add_replica(master);
        (cluster, master, replica)
    })
    .await
    .expect("cluster with a replica");
    let (master, replica) = (cluster.1, cluster.2);
    let urls = cluster.0.urls();
    let (a, b) = (client(urls.clone()).await, client(urls).await);

    let ttl = Duration::from_secs(12);
    let guard = a.lock(key).ttl(ttl).acquire().await.expect("A acquires");
    let replica_has_it = {
        let node = &cluster.0.nodes()[replica];
        eventually(Duration::from_secs(5), || {
            exists_on_replica(node, &lock_name(key))
        })
        .await
    };
    assert!(replica_has_it, "the lock never reached the replica");

    let waiter = tokio::spawn({
        let b = b.clone();
        async move {
            let got = b
                .lock(key)
                .ttl(ttl)
                .wait(Duration::from_secs(60))
                .acquire()
                .await;
            (got, Instant::now())
        }
    });
    let subscribed = {
        let node = &cluster.0.nodes()[master];
        eventually(Duration::from_secs(5), || shard_subscribers(node, key) == 1).await
    };
    assert!(subscribed, "the waiter did not subscribe on the master");

    let slot = slot_of(key);
    cluster = tokio::task::spawn_blocking(move || {
        cluster.0.kill_and_fail_over(master, replica, slot);
        cluster
    })
    .await
    .expect("failover");

    // Let the waiter settle: the failover woke it (its connection broke),
    // it retried until it found the lock busy on the new master, and it
    // sleeps again. A release it does not hear now would go unnoticed.
    tokio::time::sleep(Duration::from_secs(3)).await;
    // The lease survived the failover: A can extend it on the new master.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match guard.extend(ttl).await {
            Ok(()) => break,
            Err(e) if Instant::now() < deadline && e.is_unavailable() => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("A's lease after the failover: {e}"),
        }
    }
    let extended = Instant::now();
    let released = Instant::now();
    guard.release().await.expect("A releases on the new master");

    // Correctness bound: well before the lease would have run out.
    let bound = Duration::from_secs(6);
    let (got, woke) = tokio::time::timeout(bound, waiter)
        .await
        .unwrap_or_else(|_| {
            panic!(
                "the waiter was not woken by the release ({:?} ago; the lease would have ended {:?} after the release)",
                released.elapsed(),
                (extended + ttl).saturating_duration_since(released)
            )
        })
        .expect("waiter task");
    let got = got.expect("B acquires after the release");
    assert!(woke - released < bound);
    got.release().await.expect("B releases");
    drop(cluster);
}

/// #15: with the lock's keys already moved and its slot half-migrated
/// (Redis answers `TRYAGAIN` to the release script), `release()` keeps
/// retrying and lands once the migration ends; the lock does not stay for
/// its TTL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_during_a_slot_migration_lands() {
    let key = "migrating-release";
    let cluster = tokio::task::spawn_blocking(|| Arc::new(RedisCluster::start(3)))
        .await
        .expect("cluster");
    let a = client(cluster.urls()).await;
    let b = client(cluster.urls()).await;
    let ttl = Duration::from_secs(25);
    let guard = a.lock(key).ttl(ttl).acquire().await.expect("A acquires");

    let slot = slot_of(key);
    let from = cluster.node_for_slot(slot);
    let to = (from + 1) % 3;
    cluster.open_migration(slot, from, to);
    let (lock, fence) = (lock_name(key), format!("leasehold:{{{key}}}:fence"));
    cluster.migrate_keys(from, to, &[&lock, &fence]);

    let releasing = tokio::spawn(async move { guard.release().await });
    // Longer than the cluster connection's own retries of TRYAGAIN.
    tokio::time::sleep(Duration::from_secs(4)).await;
    cluster.close_migration(slot, from, to);
    let migrated = Instant::now();

    let released = tokio::time::timeout(Duration::from_secs(15), releasing)
        .await
        .expect("release still pending 15 s after the migration ended")
        .expect("release task");
    let gone = eventually(Duration::from_secs(5), || {
        int(&cluster.nodes()[to].cmd(&["EXISTS", &lock])) == 0
    })
    .await;
    assert!(
        released.is_ok(),
        "release mid-migration: {released:?}; the lock stays (PTTL {:?} on the new owner)",
        cluster.nodes()[to].cmd(&["PTTL", &lock])
    );
    assert!(gone, "the released lock is still set after the migration");
    let next = b
        .lock(key)
        .try_acquire()
        .await
        .expect("try_acquire after the migration");
    assert!(
        next.is_some(),
        "the lock is still taken {:?} after the migration",
        migrated.elapsed()
    );
}
