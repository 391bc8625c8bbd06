//! `LockClient::connect_cluster` against a real Redis Cluster of 3 masters
//! (each test forms its own, so slot migrations never leak between tests).
#![cfg(feature = "cluster")]

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use leasehold::{LockClient, LockError};
use redis::Value;
use support::{RedisCluster, free_port};
use tokio::time::Instant;

fn lock_name(key: &str) -> String {
    format!("leasehold:{{{key}}}:lock")
}

fn slot_of(key: &str) -> u16 {
    RedisCluster::key_slot(&lock_name(key))
}

/// A lock key whose Redis names share `slot` with another lock's.
fn key_in_slot(slot: u16, stem: &str) -> String {
    (0..)
        .map(|n| format!("{stem}-{n}"))
        .find(|key| slot_of(key) == slot)
        .expect("every slot is reachable")
}

async fn start_cluster() -> Arc<RedisCluster> {
    tokio::task::spawn_blocking(|| Arc::new(RedisCluster::start(3)))
        .await
        .expect("cluster formation")
}

async fn client(cluster: &RedisCluster) -> LockClient {
    LockClient::connect_cluster(cluster.urls())
        .await
        .expect("connect to the test cluster")
}

/// `:lock` keys on every node, in total.
fn lock_keys(cluster: &RedisCluster, pattern: &str) -> usize {
    cluster.nodes().iter().map(|n| n.keys(pattern).len()).sum()
}

/// `EXISTS` on a node that is importing the key's slot.
fn exists_asking(node: &support::RedisServer, key: &str) -> bool {
    let mut con = node.connection().expect("connect");
    redis::cmd("ASKING").query::<()>(&mut con).expect("ASKING");
    redis::cmd("EXISTS")
        .arg(key)
        .query::<bool>(&mut con)
        .expect("EXISTS")
}

/// Each node's `connected_clients`.
fn connected_clients(cluster: &RedisCluster) -> Vec<u64> {
    cluster
        .nodes()
        .iter()
        .map(|n| n.info_field("clients", "connected_clients"))
        .collect()
}

fn exists_on(cluster: &RedisCluster, node: usize, key: &str) -> bool {
    match cluster.nodes()[node].cmd(&["EXISTS", key]) {
        Value::Int(n) => n == 1,
        other => panic!("EXISTS {key}: unexpected {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_hundred_keys_over_all_nodes_renewed_and_released() {
    let cluster = start_cluster().await;
    let client = client(&cluster).await;
    let keys: Vec<String> = (0..300).map(|i| format!("bulk-{i}")).collect();

    let mut per_node = [0usize; 3];
    for key in &keys {
        per_node[cluster.node_for_slot(slot_of(key))] += 1;
    }
    assert!(
        per_node.iter().all(|&n| n > 0),
        "keys do not cover every node: {per_node:?}"
    );

    let ttl = Duration::from_millis(600);
    let mut guards = Vec::new();
    for key in &keys {
        guards.push(
            client
                .lock(key.clone())
                .ttl(ttl)
                .renew(true)
                .acquire()
                .await
                .unwrap_or_else(|e| panic!("acquire {key}: {e}")),
        );
    }
    // Forget the scripts everywhere: every slot group's first renewal
    // answers NOSCRIPT, concurrently, and must load the script and go on.
    for node in cluster.nodes() {
        node.cmd(&["SCRIPT", "FLUSH"]);
    }
    // More than three leases long: only the watchdog keeps them.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let lost: Vec<&str> = guards
        .iter()
        .filter(|g| !g.is_held())
        .map(|g| g.key())
        .collect();
    assert!(lost.is_empty(), "leases lost while renewed: {lost:?}");
    assert_eq!(lock_keys(&cluster, "leasehold:*:lock"), 300);

    for guard in guards {
        let key = guard.key().to_owned();
        guard
            .release()
            .await
            .unwrap_or_else(|e| panic!("release {key}: {e}"));
    }
    assert_eq!(lock_keys(&cluster, "leasehold:*:lock"), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_exclusion_across_two_clients() {
    const TASKS: usize = 4;
    const ROUNDS: u64 = 5;
    let cluster = start_cluster().await;
    let clients = [client(&cluster).await, client(&cluster).await];
    let inside = Arc::new(AtomicBool::new(false));
    // Read, pause, write: increments are lost unless the lock excludes.
    let counter = Arc::new(AtomicU64::new(0));
    let tokens = Arc::new(std::sync::Mutex::new(Vec::new()));

    let mut tasks = Vec::new();
    for client in &clients {
        for _ in 0..TASKS {
            let (client, inside, counter, tokens) = (
                client.clone(),
                inside.clone(),
                counter.clone(),
                tokens.clone(),
            );
            tasks.push(tokio::spawn(async move {
                for _ in 0..ROUNDS {
                    let guard = client
                        .lock("counter")
                        .ttl(Duration::from_secs(5))
                        .wait(Duration::from_secs(10))
                        .acquire()
                        .await
                        .expect("acquire within the wait");
                    assert!(!inside.swap(true, Ordering::SeqCst), "two holders at once");
                    tokens.lock().unwrap().push(guard.fencing_token());
                    let seen = counter.load(Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    counter.store(seen + 1, Ordering::SeqCst);
                    inside.store(false, Ordering::SeqCst);
                    guard.release().await.expect("release");
                }
            }));
        }
    }
    for task in tasks {
        task.await.expect("task");
    }
    assert_eq!(counter.load(Ordering::SeqCst), 2 * TASKS as u64 * ROUNDS);
    let tokens = tokens.lock().unwrap();
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "fencing tokens not strictly increasing: {tokens:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiter_in_another_client_is_woken_by_the_release() {
    let cluster = start_cluster().await;
    let (a, b) = (client(&cluster).await, client(&cluster).await);
    let holder = a
        .lock("wake")
        .ttl(Duration::from_secs(60))
        .acquire()
        .await
        .unwrap();
    let waiter = tokio::spawn(async move {
        let guard = b.lock("wake").wait(Duration::from_secs(10)).acquire().await;
        (guard, Instant::now())
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    let released = Instant::now();
    holder.release().await.unwrap();
    // The holder's lease had 60 s left and the waiter only waits 10 s:
    // acquiring at all means the release woke it.
    let (guard, woke) = waiter.await.unwrap();
    let guard = guard.expect("woken by the release");
    assert!(
        woke - released < Duration::from_secs(2),
        "woken {:?} after the release",
        woke - released
    );
    guard.release().await.unwrap();
    let calls = |command: &str| -> u64 {
        cluster
            .nodes()
            .iter()
            .map(|n| n.command_calls(command))
            .sum()
    };
    if cluster.nodes()[0].is_redis7() {
        // Redis 7: sharded pub/sub, kept on the shard that owns the lock.
        assert!(calls("spublish") >= 1, "release did not SPUBLISH");
        assert!(calls("ssubscribe") >= 1, "waiter did not SSUBSCRIBE");
        assert_eq!(calls("publish"), 0);
    } else {
        // Redis < 7 has no sharded pub/sub: the plain PUBLISH/SUBSCRIBE
        // fallback woke the waiter.
        assert!(calls("publish") >= 1, "release did not PUBLISH");
        assert!(calls("subscribe") >= 1, "waiter did not SUBSCRIBE");
        assert_eq!(calls("spublish"), 0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slot_migrated_while_held_keeps_the_lock_valid_and_releasable() {
    let cluster = start_cluster().await;
    let (a, b) = (client(&cluster).await, client(&cluster).await);
    let slot = slot_of("moving");
    let from = cluster.node_for_slot(slot);
    let to = (from + 1) % 3;

    let ttl = Duration::from_millis(900);
    let guard = a
        .lock("moving")
        .ttl(ttl)
        .renew(true)
        .acquire()
        .await
        .unwrap();
    // A second lock in the same slot, with a waiter in the other client:
    // its sharded subscription must follow the slot to the new owner.
    let peer = key_in_slot(slot, "moving-peer");
    let holder = a
        .lock(peer.clone())
        .ttl(Duration::from_secs(60))
        .acquire()
        .await
        .unwrap();
    let waiter = tokio::spawn({
        let peer = peer.clone();
        async move {
            let guard = b.lock(peer).wait(Duration::from_secs(10)).acquire().await;
            (guard, Instant::now())
        }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;

    let migrating = cluster.clone();
    tokio::task::spawn_blocking(move || migrating.migrate_slot(slot, to))
        .await
        .unwrap();
    assert_eq!(cluster.node_for_slot(slot), to);
    assert!(exists_on(&cluster, to, &lock_name("moving")));

    // Several renewal periods (ttl / 3) on the new owner.
    tokio::time::sleep(ttl * 2).await;
    assert!(guard.is_held(), "lease lost across the migration");
    assert!(exists_on(&cluster, to, &lock_name("moving")));
    guard.extend(Duration::from_secs(2)).await.unwrap();

    let released = Instant::now();
    holder.release().await.unwrap();
    let (peer_guard, woke) = waiter.await.unwrap();
    let peer_guard = peer_guard.expect("waiter woken by the release after the migration");
    assert!(
        woke - released < Duration::from_secs(3),
        "woken {:?} after the release",
        woke - released
    );
    peer_guard.release().await.unwrap();

    guard.release().await.unwrap();
    assert!(!exists_on(&cluster, to, &lock_name("moving")));
    assert!(!exists_on(&cluster, to, &lock_name(&peer)));
}

/// Half a migration, done by hand: the keys already live on the target but
/// the source still owns the slot (`MIGRATING`), so it answers `ASK`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ask_redirects_mid_migration_are_followed() {
    let cluster = start_cluster().await;
    let client = client(&cluster).await;
    let slot = slot_of("asked");
    let from = cluster.node_for_slot(slot);
    let to = (from + 1) % 3;
    let ttl = Duration::from_millis(900);
    let guard = client
        .lock("asked")
        .ttl(ttl)
        .renew(true)
        .acquire()
        .await
        .unwrap();

    let dst = &cluster.nodes()[to];
    cluster.open_migration(slot, from, to);
    let (lock, fence) = (lock_name("asked"), "leasehold:{asked}:fence".to_owned());
    cluster.migrate_keys(from, to, &[&lock, &fence]);

    // Renewals and extend of a held lock: by ASK.
    tokio::time::sleep(ttl * 2).await;
    assert!(guard.is_held(), "lease lost mid-migration");
    guard.extend(Duration::from_secs(2)).await.unwrap();
    assert!(exists_asking(dst, &lock));

    // A new lock in the slot: Redis answers TRYAGAIN to multi-key scripts
    // whose keys are not all on one side, until the migration ends; the
    // request retries within its wait budget.
    let other = key_in_slot(slot, "asked-too");
    let pending = tokio::spawn({
        let (client, other) = (client.clone(), other.clone());
        async move {
            client
                .lock(other)
                .wait(Duration::from_secs(10))
                .acquire()
                .await
        }
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    cluster.close_migration(slot, from, to);
    let second = pending
        .await
        .unwrap()
        .expect("acquired once the migration ended");
    assert!(exists_on(&cluster, to, &lock_name(&other)));
    second.release().await.unwrap();

    guard.release().await.unwrap();
    assert!(!exists_on(&cluster, to, &lock));
    assert!(!exists_on(&cluster, to, &lock_name(&other)));
}

#[tokio::test]
async fn an_empty_url_list_is_an_invalid_argument() {
    let err = LockClient::connect_cluster(Vec::<String>::new())
        .await
        .unwrap_err();
    assert!(
        matches!(err, LockError::InvalidArgument { name: "urls", .. }),
        "{err:?}"
    );
    let err = LockClient::connect_cluster(["not a url"])
        .await
        .unwrap_err();
    assert!(matches!(err, LockError::InvalidArgument { .. }), "{err:?}");
}

#[tokio::test]
async fn unreachable_nodes_fail_promptly_without_leaking_the_password() {
    let urls: Vec<String> = (0..3)
        .map(|_| format!("redis://:hunter2@127.0.0.1:{}", free_port()))
        .collect();
    let started = Instant::now();
    let err = LockClient::connect_cluster(&urls).await.unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "took {:?}",
        started.elapsed()
    );
    assert!(matches!(err, LockError::Backend { .. }), "{err:?}");
    let text = err.to_string();
    assert!(!text.contains("hunter2"), "{text}");
    assert!(text.contains(":***@127.0.0.1"), "{text}");
}

mod with_the_attribute {
    use super::*;
    use leasehold::distributed_lock;

    #[distributed_lock(key = "job:<name>", ttl = "2s", renew, client = client)]
    async fn job(client: &LockClient, name: &str) -> Result<Option<u64>, LockError> {
        tokio::time::sleep(Duration::from_millis(200)).await;
        Ok(leasehold::fencing_token())
    }

    #[tokio::test]
    async fn the_attribute_works_unchanged_on_cluster() {
        let cluster = RedisCluster::start(3);
        let a = LockClient::connect_cluster(cluster.urls()).await.unwrap();
        let b = LockClient::connect_cluster(cluster.urls()).await.unwrap();
        let (first, second) = tokio::join!(job(&a, "x"), job(&b, "x"));
        let outcomes = [first, second];
        let ran = outcomes.iter().filter(|r| matches!(r, Ok(Some(_)))).count();
        let busy = outcomes
            .iter()
            .filter(|r| matches!(r, Err(LockError::Busy { .. })))
            .count();
        assert_eq!((ran, busy), (1, 1), "{outcomes:?}");
    }
}

/// A release while the lock's slot is stuck half-migrated
/// (the lock key already on the target, the line not: every multi-key
/// script answers `TRYAGAIN`) returns at once instead of blocking for the
/// rest of the lease, and keeps trying in the background: the lock is free
/// as soon as the slot settles, not when the lease runs out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_during_a_stuck_migration_returns_and_lands_when_the_slot_settles() {
    let cluster = start_cluster().await;
    let client = client(&cluster).await;
    let slot = slot_of("stuck");
    let from = cluster.node_for_slot(slot);
    let to = (from + 1) % 3;
    let ttl = Duration::from_secs(20);
    let guard = client.lock("stuck").ttl(ttl).acquire().await.unwrap();

    let dst = &cluster.nodes()[to];
    cluster.open_migration(slot, from, to);
    let lock = lock_name("stuck");
    cluster.migrate_keys(from, to, &[&lock]);
    assert!(exists_asking(dst, &lock));

    let started = Instant::now();
    let released = tokio::time::timeout(Duration::from_secs(5), guard.release()).await;
    let took = started.elapsed();
    assert!(
        released.is_ok(),
        "the release blocked while the slot was stuck ({took:?} and counting)"
    );

    // The migration goes on: the rest of the slot's keys, then the slot.
    let fence = "leasehold:{stuck}:fence".to_owned();
    cluster.migrate_keys(from, to, &[&fence]);
    cluster.close_migration(slot, from, to);
    let settled = Instant::now();
    while exists_on(&cluster, to, &lock) {
        assert!(
            settled.elapsed() < Duration::from_secs(5),
            "the lock was still held {:?} after the slot settled (lease {ttl:?})",
            settled.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let next = client.lock("stuck").try_acquire().await.unwrap();
    assert!(next.is_some(), "free after the release landed");
    println!(
        "cluster/stuck migration: release returned in {took:?}, landed {:?} after the slot settled",
        settled.elapsed()
    );
}

/// Sends SIGCONT to a stopped node when dropped, so a failing assertion
/// never leaves a `redis-server` stopped.
struct Thaw(u32);

impl Drop for Thaw {
    fn drop(&mut self) {
        support::thaw_process(self.0);
    }
}

/// A `lock_all` spanning two masters gives every key back at once: with the
/// master of the first key stopped (SIGSTOP), a waiter for the key on a
/// healthy master is served within a couple of seconds of the release, not
/// after the stalled key's response timeout and retries; the release
/// reports the stalled key's failure once both keys were tried.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_all_release_is_not_held_up_by_a_stopped_master() {
    let cluster = start_cluster().await;
    for node in cluster.nodes() {
        // The healthy masters keep serving their slots while one is down.
        node.cmd(&["CONFIG", "SET", "cluster-require-full-coverage", "no"]);
    }
    let (holder, waiter_client) = (client(&cluster).await, client(&cluster).await);
    let first = key_in_slot(slot_of("all-a"), "all-a");
    let stalled_node = cluster.node_for_slot(slot_of(&first));
    let second = (0..)
        .map(|n| format!("all-b-{n}"))
        .find(|key| cluster.node_for_slot(slot_of(key)) != stalled_node)
        .expect("a key on another master");
    assert!(first < second, "the stalled key comes first in every order");

    let held = holder
        .lock_all([first.clone(), second.clone()])
        .ttl(Duration::from_secs(60))
        .acquire()
        .await
        .expect("lock_all across two masters");
    let waiter = {
        let second = second.clone();
        tokio::spawn(async move {
            let guard = waiter_client
                .lock(&second)
                .wait(Duration::from_secs(30))
                .acquire()
                .await;
            (guard, Instant::now())
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;

    let pid = cluster.nodes()[stalled_node].pid().expect("the node runs");
    support::freeze_process(pid);
    let thaw = Thaw(pid);
    let started = Instant::now();
    let release = tokio::spawn(async move { (held.release().await, Instant::now()) });

    let (guard, served) = waiter.await.expect("waiter task");
    let guard = guard.expect("the key on the healthy master is given back and granted");
    let served_after = served - started;
    // The lease had 60 s left and the stalled call's timeout is 2 s with
    // retries: being served this soon means the healthy key did not wait.
    assert!(
        served_after < Duration::from_secs(2),
        "the waiter on a healthy master was served {served_after:?} after the release began"
    );
    let (released, returned) = release.await.expect("release task");
    println!(
        "cluster/lock_all with a stopped master: waiter served after {served_after:?}, \
         release returned after {:?} ({released:?})",
        returned - started,
    );
    guard.release().await.expect("the waiter releases its key");

    // Resumed, the stalled master gets its key back too (the lease had
    // 60 s left): the release kept going past the key that failed.
    drop(thaw);
    let resumed = Instant::now();
    let lock = lock_name(&first);
    while exists_on(&cluster, stalled_node, &lock) {
        assert!(
            resumed.elapsed() < Duration::from_secs(20),
            "the stalled key was still held {:?} after its master resumed",
            resumed.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A key on master `node` (by its lock name's slot), named `stem-N`.
fn key_on(cluster: &RedisCluster, node: usize, stem: &str) -> String {
    (0..)
        .map(|n| format!("{stem}-{n}"))
        .find(|key| cluster.node_for_slot(slot_of(key)) == node)
        .expect("a key on every master")
}

/// A master that restarts empty (same port, same `nodes.conf`, so the same
/// node id and slots) is a new server process: each client sees it as its
/// own node. The holder of a lease there is told at once (not at its next
/// renewal); a client that asked for that key within its lease gets
/// `Unavailable` for about the lease, yet is granted a key there that it
/// never asked for; a client with `restart_grace` grants nothing on the
/// young master, and the other masters keep granting as usual.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_restarted_empty_is_noticed_per_node() {
    const GRACE: Duration = Duration::from_secs(3);
    const LEASE: Duration = Duration::from_secs(60);
    let mut cluster = tokio::task::spawn_blocking(|| RedisCluster::start(3))
        .await
        .expect("cluster formation");
    // Older than the grace (uptime counts whole seconds, read 1 s low).
    while cluster
        .nodes()
        .iter()
        .any(|n| n.info_field("server", "uptime_in_seconds") <= GRACE.as_secs() + 1)
    {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let restarted = 1;
    let other = 2;
    let held = key_on(&cluster, restarted, "held");
    let elsewhere = key_on(&cluster, other, "elsewhere");
    let never_asked = key_on(&cluster, restarted, "never");
    let young = key_on(&cluster, restarted, "young");

    let holder = client(&cluster).await;
    let peer = client(&cluster).await;
    let graced = LockClient::builder()
        .restart_grace(GRACE)
        .connect_cluster(cluster.urls())
        .await
        .expect("connect with restart_grace");
    let guard = holder
        .lock(&held)
        .ttl(LEASE)
        .renew(true)
        .acquire()
        .await
        .expect("the holder's lease");
    let kept = holder
        .lock(&elsewhere)
        .ttl(LEASE)
        .renew(true)
        .acquire()
        .await
        .expect("a lease on another master");
    assert!(
        peer.lock(&held)
            .ttl(LEASE)
            .try_acquire()
            .await
            .expect("ask")
            .is_none(),
        "held by the holder"
    );
    assert!(
        graced
            .lock(&young)
            .try_acquire()
            .await
            .expect("old enough")
            .is_some(),
        "the masters are older than the grace"
    );

    let node = cluster.node_mut(restarted);
    tokio::task::block_in_place(|| node.restart());
    let restart = Instant::now();
    let cluster = Arc::new(cluster);
    let ok = {
        let cluster = cluster.clone();
        tokio::task::spawn_blocking(move || {
            cluster.wait_until_ok();
            Instant::now()
        })
    };
    // Told at once: long before its first renewal (LEASE / 3).
    tokio::time::timeout(Duration::from_secs(8), guard.lost())
        .await
        .expect("the holder is told that its lease is gone, before its next renewal");
    let told = restart.elapsed();
    let ok = ok.await.expect("cluster ok") - restart;
    println!(
        "cluster/master restarted empty: holder told {told:?} after the restart, cluster ok after {ok:?}"
    );
    assert!(!guard.is_held());
    assert!(kept.is_held(), "a lease on another master is kept");

    closed_for_about_the_lease(&peer, &held, &never_asked, LEASE, Duration::from_secs(15)).await;

    let young_refused = graced
        .lock(&young)
        .try_acquire()
        .await
        .expect_err("restart_grace: nothing granted on a master younger than the grace");
    assert!(young_refused.is_unavailable(), "{young_refused}");
    assert!(
        young_refused.retry_after().is_some_and(|d| d <= GRACE),
        "{young_refused}"
    );
    // A `lock_all` across masters is judged key by key, each on its own
    // master: its young key refuses it.
    let across = graced
        .lock_all([
            key_on(&cluster, other, "a-all"),
            key_on(&cluster, restarted, "z-all"),
        ])
        .try_acquire()
        .await
        .expect_err("restart_grace: a lock_all with a key on the young master");
    assert!(across.is_unavailable(), "{across}");
    assert!(
        graced
            .lock(key_on(&cluster, other, "graced"))
            .try_acquire()
            .await
            .expect("an old master")
            .is_some(),
        "the other masters are older than the grace and grant as usual"
    );

    // Dropped, a client leaves no connection behind (its identity checker
    // ends with it): one connection per master.
    let open = || connected_clients(&cluster);
    let before = open();
    drop(peer);
    let dropped = Instant::now();
    loop {
        let open = open();
        if open.iter().zip(&before).all(|(&now, &was)| now + 1 == was) {
            break;
        }
        assert!(
            dropped.elapsed() < Duration::from_secs(10),
            "a dropped client left connections open: {open:?} (before: {before:?})"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A replica promoted without the data (it restarted empty while its
/// master was down, then took over): a failover of that master's slots,
/// seen per node. The holder of a lease there is told at once; a key
/// asked for within its lease is `Unavailable` for about the lease, a key
/// never asked for is granted; with `restart_grace`, the promoted replica
/// grants nothing for the grace, counted from when the client saw it take
/// over (its own uptime says nothing about that), while the other masters
/// grant as usual.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_promoted_without_the_data_is_a_failover_of_its_slots_only() {
    let mut p = Promotion::set_up(|cluster, replica| cluster.node_mut(replica).stop()).await;
    // The master dies; its replica comes back empty and takes over.
    let (master, replica) = (Promotion::MASTER, p.replica);
    let slot = slot_of(&p.held);
    let failover = Instant::now();
    tokio::task::block_in_place(|| {
        p.cluster.node_mut(master).stop();
        p.cluster.node_mut(replica).restart();
        p.cluster.kill_and_fail_over(master, replica, slot);
    });
    let promoted = failover.elapsed();
    assert_eq!(p.cluster.node_for_slot(slot), replica);
    tokio::time::timeout(Duration::from_secs(8), p.guard.lost())
        .await
        .expect("the holder is told that its lease is gone, before its next renewal");
    println!(
        "cluster/replica promoted without the data: holder told {:?} after the master died, \
         replica promoted after {promoted:?}",
        failover.elapsed()
    );
    assert_eq!(p.guard.lost_cause(), Some(leasehold::LostCause::FailedOver));
    p.closed_after_the_promotion().await;
}

/// A failover that breaks none of the client's connections: `CLUSTER
/// FAILOVER` turns the old master into a replica that still answers, with
/// `MOVED`, and redis-rs follows the redirect to the promoted replica by
/// itself. Here the replica lacks the holder's lease (flushed on it alone,
/// as a replica that lagged would lack it). The redirect is seen as a
/// change: the peer's attempt, granted by the promoted node, is taken back
/// and refused as unavailable for about the lease (before: granted, two
/// holders); the holder is told; `restart_grace` applies to the promoted
/// node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_followed_by_moved_over_open_connections_is_seen() {
    let p = Promotion::set_up(|_, _| {}).await;
    let (master, replica) = (Promotion::MASTER, p.replica);
    // The replica has the lease; it loses it alone (as one that lagged
    // would lack it): a write without keys is not redirected.
    let name = lock_name(&p.held);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !p.cluster.nodes()[replica].keys("*").contains(&name) {
        assert!(Instant::now() < deadline, "the lease reaches the replica");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    p.cluster.nodes()[replica].cmd(&["CONFIG", "SET", "replica-read-only", "no"]);
    p.cluster.nodes()[replica].cmd(&["FLUSHALL"]);
    assert!(p.cluster.nodes()[replica].keys("*").is_empty());
    tokio::task::block_in_place(|| p.cluster.manual_failover(replica, slot_of(&p.held)));
    assert!(
        p.cluster.nodes()[master].is_running(),
        "the old master stays up"
    );
    assert!(
        !exists_on(&p.cluster, replica, &name),
        "the promoted replica lacks the lease"
    );

    let attempt = Instant::now();
    p.closed_after_the_promotion().await;
    tokio::time::timeout(Duration::from_secs(8), p.guard.lost())
        .await
        .expect("the holder is told that its lease is gone");
    println!(
        "cluster/failover over open connections: holder told {:?} after the first redirected attempt",
        attempt.elapsed()
    );
    assert_eq!(p.guard.lost_cause(), Some(leasehold::LostCause::FailedOver));
}

/// Three masters, a replica of master 1, all older than the grace; a
/// holder's lease on master 1 that a peer asked for; a client with
/// `restart_grace`.
struct Promotion {
    cluster: RedisCluster,
    replica: usize,
    held: String,
    never_asked: String,
    young: String,
    peer: LockClient,
    graced: LockClient,
    guard: leasehold::LockGuard,
    _holder: LockClient,
}

impl Promotion {
    const GRACE: Duration = Duration::from_secs(3);
    const LEASE: Duration = Duration::from_secs(60);
    const MASTER: usize = 1;
    const OTHER: usize = 2;

    /// `before_grant` runs just before the holder's lease is granted.
    async fn set_up(before_grant: impl FnOnce(&mut RedisCluster, usize)) -> Promotion {
        let (mut cluster, replica) = tokio::task::spawn_blocking(|| {
            let mut cluster = RedisCluster::start(3);
            let replica = cluster.add_replica(Promotion::MASTER);
            (cluster, replica)
        })
        .await
        .expect("cluster formation");
        // Older than the grace (uptime counts whole seconds, read 1 s low).
        while cluster
            .nodes()
            .iter()
            .any(|n| n.info_field("server", "uptime_in_seconds") <= Self::GRACE.as_secs() + 1)
        {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let held = key_on(&cluster, Self::MASTER, "held");
        let never_asked = key_on(&cluster, Self::MASTER, "never");
        let young = key_on(&cluster, Self::MASTER, "young");
        let holder = client(&cluster).await;
        let peer = client(&cluster).await;
        let graced = LockClient::builder()
            .restart_grace(Self::GRACE)
            .connect_cluster(cluster.urls())
            .await
            .expect("connect with restart_grace");
        tokio::task::block_in_place(|| before_grant(&mut cluster, replica));
        let guard = holder
            .lock(&held)
            .ttl(Self::LEASE)
            .renew(true)
            .acquire()
            .await
            .expect("the holder's lease");
        assert!(
            peer.lock(&held)
                .ttl(Self::LEASE)
                .try_acquire()
                .await
                .expect("ask")
                .is_none(),
            "held by the holder"
        );
        Promotion {
            cluster,
            replica,
            held,
            never_asked,
            young,
            peer,
            graced,
            guard,
            _holder: holder,
        }
    }

    /// After the replica took over: the key the peer asked for is closed
    /// for about the lease, one never asked for is granted; the graced
    /// client refuses the promoted replica's keys, and the other masters
    /// grant as usual.
    async fn closed_after_the_promotion(&self) {
        closed_for_about_the_lease(
            &self.peer,
            &self.held,
            &self.never_asked,
            Self::LEASE,
            Duration::from_secs(20),
        )
        .await;
        let young_refused = self
            .graced
            .lock(&self.young)
            .try_acquire()
            .await
            .expect_err("restart_grace: nothing granted on a primary promoted within the grace");
        assert!(young_refused.is_unavailable(), "{young_refused}");
        assert!(
            self.graced
                .lock(key_on(&self.cluster, Self::OTHER, "graced"))
                .try_acquire()
                .await
                .expect("an old master")
                .is_some(),
            "the other masters grant as usual"
        );
    }
}

/// After a master changed: `held`, asked for within its lease before the
/// change, is refused as unavailable until about the lease has passed
/// (`retry_after` within `slack` of it); `never_asked` is granted.
async fn closed_for_about_the_lease(
    peer: &LockClient,
    held: &str,
    never_asked: &str,
    lease: Duration,
    slack: Duration,
) {
    let refused = peer
        .lock(held)
        .ttl(lease)
        .try_acquire()
        .await
        .expect_err("a key asked for within its lease before the change is closed");
    assert!(refused.is_unavailable() && !refused.is_busy(), "{refused}");
    let left = refused
        .retry_after()
        .unwrap_or_else(|| panic!("when it reopens: {refused}"));
    assert!(
        left > lease - slack && left <= lease,
        "closed for about the lease: {left:?}"
    );
    assert!(
        peer.lock(never_asked)
            .try_acquire()
            .await
            .expect("never asked")
            .is_some(),
        "a key never asked for is granted on the changed master"
    );
}

/// A client built with the builder (with and without `restart_grace`, the
/// per-node identity checks) that held, waited (pub/sub) and released on
/// every master leaves no connection behind on any of them once dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_builder_client_leaves_no_connection_on_any_master() {
    let cluster = start_cluster().await;
    let open = || connected_clients(&cluster);
    let before = open();
    for grace in [None, Some(Duration::from_secs(1))] {
        let mut builder = LockClient::builder();
        if let Some(grace) = grace {
            builder = builder.restart_grace(grace);
        }
        let client = builder
            .connect_cluster(cluster.urls())
            .await
            .expect("connect with the builder");
        let other = client.clone();
        for node in 0..cluster.nodes().len() {
            let key = key_on(&cluster, node, "conns");
            let held = client
                .lock(&key)
                .ttl(Duration::from_millis(400))
                .acquire()
                .await
                .expect("acquire");
            // A waiter on the same client: it subscribes, and is served
            // when the lease is given back.
            let waiter = tokio::spawn({
                let other = other.clone();
                let key = key.clone();
                async move {
                    other
                        .lock(&key)
                        .wait(Duration::from_secs(5))
                        .acquire()
                        .await
                }
            });
            tokio::time::sleep(Duration::from_millis(100)).await;
            held.release().await.expect("release");
            let second = waiter.await.expect("task").expect("the waiter is served");
            second.release().await.expect("release");
        }
        drop(other);
        drop(client);
        let dropped = Instant::now();
        loop {
            let now = open();
            if now == before {
                break;
            }
            assert!(
                dropped.elapsed() < Duration::from_secs(10),
                "grace {grace:?}: a dropped client left connections open: {now:?} (before it connected: {before:?})"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}
