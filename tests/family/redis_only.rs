//! What only Redis shows: the layout on the server, Redlock's refusal,
//! Cluster, cancellation leaving no place in line.

use std::time::Duration;

use leasehold::{LockClient, LockError};

use crate::support::{MASTER_NAME, RedisCluster, RedisServer, SentinelSet};

/// A semaphore's holders live in one hash at the lock's own name, with an
/// expiry; the line and places next to it; all gone after the release.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn semaphore_layout_on_the_server() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    let permit = client
        .semaphore("laid-out", 2)
        .ttl(Duration::from_secs(10))
        .acquire()
        .await
        .unwrap();
    assert_eq!(
        server.cmd(&["TYPE", "leasehold:{laid-out}:lock"]),
        redis::Value::SimpleString("hash".into())
    );
    match server.cmd(&["PTTL", "leasehold:{laid-out}:lock"]) {
        redis::Value::Int(ms) => assert!(ms > 0 && ms <= 10_000),
        other => panic!("{other:?}"),
    }
    permit.release().await.unwrap();
    assert_eq!(
        server.cmd(&["EXISTS", "leasehold:{laid-out}:lock"]),
        redis::Value::Int(0)
    );
}

/// A free permit's fencing token is the server clock and writes no fence
/// key; a fence key ahead of the clock (a clock that was ahead) raises the
/// token, free or not, and a raised token is written, so that the next
/// free grant is above it too (semantic 7).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_free_grant_honours_a_fence_key_ahead_of_the_clock() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    let fence_key = "leasehold:{ahead}:fence";
    let first = client.semaphore("ahead", 2).acquire().await.unwrap();
    assert!(first.fencing_token() > 0);
    first.release().await.unwrap();
    assert_eq!(server.cmd(&["EXISTS", fence_key]), redis::Value::Int(0));
    let ahead: u64 = 9_000_000_000_000_000;
    server.cmd(&["SET", fence_key, &ahead.to_string()]);
    let one = client.semaphore("ahead", 2).acquire().await.unwrap();
    let two = client.semaphore("ahead", 2).acquire().await.unwrap();
    assert_eq!(one.fencing_token(), ahead + 1);
    assert_eq!(two.fencing_token(), ahead + 2);
    one.release().await.unwrap();
    two.release().await.unwrap();
    let three = client.semaphore("ahead", 2).acquire().await.unwrap();
    assert_eq!(three.fencing_token(), ahead + 3);
    three.release().await.unwrap();
}

/// A full semaphore's busy reply does not read its line, so a line key of
/// another type is met when the waiter joins it: reported as `WrongType`
/// naming that key, with no place written and the holder untouched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_line_of_another_type_is_reported_to_a_waiter_of_a_full_key() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    let held = client
        .semaphore("bad-line", 1)
        .ttl(Duration::from_secs(10))
        .acquire()
        .await
        .unwrap();
    server.cmd(&["SET", "leasehold:{bad-line}:line", "not a list"]);
    let waiting = client
        .semaphore("bad-line", 1)
        .wait(Duration::from_secs(5))
        .acquire()
        .await;
    match waiting {
        Err(LockError::WrongType { key, redis_key }) => {
            assert_eq!(key, "bad-line");
            assert_eq!(redis_key, "leasehold:{bad-line}:line");
        }
        other => panic!("expected WrongType for the line, got {other:?}"),
    }
    assert_eq!(
        server.cmd(&["EXISTS", "leasehold:{bad-line}:places"]),
        redis::Value::Int(0),
        "no place written"
    );
    assert_eq!(
        server.cmd(&["GET", "leasehold:{bad-line}:line"]),
        redis::Value::BulkString(b"not a list".to_vec())
    );
    assert_eq!(
        server.cmd(&["HLEN", "leasehold:{bad-line}:lock"]),
        redis::Value::Int(1)
    );
    held.release().await.unwrap();
}

/// A waiter whose acquisition is dropped leaves the line at once, and the
/// holder's later release names nobody.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_waiter_leaves_the_line() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    let held = client.semaphore("cancel", 1).acquire().await.unwrap();
    let waiting = client
        .semaphore("cancel", 1)
        .wait(Duration::from_secs(30))
        .acquire();
    let cancelled = tokio::time::timeout(Duration::from_millis(300), waiting).await;
    assert!(cancelled.is_err(), "still waiting when dropped");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while server.cmd(&["LLEN", "leasehold:{cancel}:line"]) != redis::Value::Int(0) {
        assert!(tokio::time::Instant::now() < deadline, "the place stayed");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    held.release().await.unwrap();
    assert!(
        client
            .semaphore("cancel", 1)
            .try_acquire()
            .await
            .unwrap()
            .is_some()
    );
}

/// Redlock keeps no quorum rules for the family: refused with the topology
/// named.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_refuses_the_family() {
    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let client = LockClient::connect_redlock(servers.iter().map(RedisServer::url))
        .await
        .unwrap();
    let refused = [
        client.semaphore("r", 2).try_acquire().await.err(),
        client.rw_lock("r").read().try_acquire().await.err(),
        client.rw_lock("r").write().try_acquire().await.err(),
        client.lock_all(["a", "b"]).try_acquire().await.err(),
    ];
    for error in refused {
        match error {
            Some(LockError::InvalidArgument { reason, .. }) => {
                assert!(reason.contains("Redlock"), "{reason}")
            }
            other => panic!("not refused: {other:?}"),
        }
    }
}

/// On Cluster: a semaphore and a rw lock work (their names share a slot).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_semaphore_and_rw_lock() {
    let cluster = RedisCluster::start(3);
    let client = LockClient::connect_cluster(cluster.urls()).await.unwrap();
    let other = LockClient::connect_cluster(cluster.urls()).await.unwrap();
    let one = client
        .semaphore("cl-sem", 1)
        .renew(true)
        .ttl(Duration::from_millis(900))
        .acquire()
        .await
        .unwrap();
    let waiting = tokio::spawn(async move {
        other
            .semaphore("cl-sem", 1)
            .wait(Duration::from_secs(30))
            .acquire()
            .await
    });
    // Renewed across its TTL (the per-slot family renewal).
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(one.is_held());
    one.release().await.unwrap();
    let got = waiting.await.unwrap().unwrap();
    got.release().await.unwrap();

    let rw = client.rw_lock("cl-doc");
    let r = rw.read().acquire().await.unwrap();
    assert!(rw.write().try_acquire().await.unwrap().is_none());
    r.release().await.unwrap();
    rw.write().acquire().await.unwrap().release().await.unwrap();

    // lock_all across slots: taken key by key in sorted order, given back
    // when one is busy; renewed as one lease; opposite orders both finish.
    let both = client
        .lock_all(["acct:b", "acct:a", "acct:c"])
        .renew(true)
        .ttl(Duration::from_millis(900))
        .acquire()
        .await
        .unwrap();
    assert!(client.lock("acct:c").try_acquire().await.unwrap().is_none());
    tokio::time::sleep(Duration::from_millis(1300)).await;
    assert!(both.is_held());
    let other = LockClient::connect_cluster(cluster.urls()).await.unwrap();
    let opposite = tokio::spawn(async move {
        other
            .lock_all(["acct:c", "acct:a"])
            .wait(Duration::from_secs(30))
            .acquire()
            .await
    });
    both.release().await.unwrap();
    let got = opposite.await.unwrap().unwrap();
    assert!(got.fencing_token_of("acct:c").is_some());
    got.release().await.unwrap();
    assert!(client.lock("acct:a").try_acquire().await.unwrap().is_some());
}

/// A server restart without persistence loses the permits held there: each
/// holder is told at once (`Restarted`), not at its next renewal, and the
/// restarted server does not grant the semaphore to another client of the
/// same process unseen.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_loses_the_permits_held_there() {
    let mut server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    let permit = client
        .semaphore("restart", 2)
        .ttl(Duration::from_secs(30))
        .renew(true)
        .acquire()
        .await
        .unwrap();
    server.restart();
    // Any command makes the client reconnect and notice the new run_id.
    for _ in 0..20 {
        if client.lock("restart-probe").try_acquire().await.is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::timeout(Duration::from_secs(8), permit.lost())
        .await
        .expect("the permit is reported lost well before its next renewal");
    assert_eq!(permit.lost_cause(), Some(leasehold::LostCause::Restarted));
}

/// On Sentinel: a semaphore, a rw lock and lock_all through the primary the
/// sentinels name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel_family() {
    let set = tokio::task::spawn_blocking(SentinelSet::start)
        .await
        .expect("harness thread");
    let urls = set.sentinel_urls();
    let client = LockClient::connect_sentinel(MASTER_NAME, &urls)
        .await
        .unwrap();
    let one = client.semaphore("s-sem", 1).acquire().await.unwrap();
    assert!(
        client
            .semaphore("s-sem", 1)
            .try_acquire()
            .await
            .unwrap()
            .is_none()
    );
    one.release().await.unwrap();
    let r = client.rw_lock("s-doc").read().acquire().await.unwrap();
    assert!(
        client
            .rw_lock("s-doc")
            .write()
            .try_acquire()
            .await
            .unwrap()
            .is_none()
    );
    r.release().await.unwrap();
    let both = client.lock_all(["s:1", "s:2"]).acquire().await.unwrap();
    assert!(client.lock("s:2").try_acquire().await.unwrap().is_none());
    both.release().await.unwrap();
}

/// On Cluster, keys whose names fall in one slot (`t:1` and `t:641`: slot
/// 2276) are taken by `lock_all`'s one script: a waiter keeps a place in every line, and a
/// later plain lock does not take its free key before it (first come,
/// first served across its keys, as on one server).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_lock_all_in_one_slot_is_not_overtaken() {
    let cluster = RedisCluster::start(3);
    let (a, b, c) = (
        LockClient::connect_cluster(cluster.urls()).await.unwrap(),
        LockClient::connect_cluster(cluster.urls()).await.unwrap(),
        LockClient::connect_cluster(cluster.urls()).await.unwrap(),
    );
    let plain = a.lock("t:641").acquire().await.unwrap();
    let waiting = tokio::spawn(async move {
        b.lock_all(["t:1", "t:641"])
            .wait(Duration::from_secs(30))
            .acquire()
            .await
    });
    // A hang guard, not a timing check: until the lock_all is in line.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while a
        .inspect("t:641")
        .await
        .unwrap()
        .map_or(0, |info| info.waiters)
        != 1
    {
        assert!(tokio::time::Instant::now() < deadline, "never in line");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(
        c.lock("t:1").try_acquire().await.unwrap().is_none(),
        "a plain newcomer took t:1 before the waiting lock_all"
    );
    plain.release().await.unwrap();
    let both = waiting.await.unwrap().unwrap();
    assert!(c.lock("t:1").try_acquire().await.unwrap().is_none());
    both.release().await.unwrap();
    assert!(c.lock("t:1").try_acquire().await.unwrap().is_some());
}

/// A permit still valid is given back without a script (`HDEL` of its own
/// field, `EXISTS` of the line); with someone in line, the release
/// script's wake mode tells the first waiter at once, here one on another
/// connection, which would otherwise sleep until the holder's 30 s lease
/// ran out and give up after its 20 s budget.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_valid_permit_is_given_back_natively_and_the_next_is_woken() {
    let server = RedisServer::start();
    let holder = LockClient::connect(&server.url()).await.unwrap();
    let other = LockClient::connect(&server.url()).await.unwrap();
    let ttl = Duration::from_secs(30);

    // Nobody waits: no script at all for the release.
    let permit = holder
        .semaphore("native", 1)
        .ttl(ttl)
        .acquire()
        .await
        .unwrap();
    server.cmd(&["CONFIG", "RESETSTAT"]);
    permit.release().await.unwrap();
    if server.is_redis7() {
        // Where the fast path's commands are (Redis >= 7, every Valkey).
        assert_eq!(
            server.command_calls("evalsha"),
            0,
            "the release ran a script"
        );
        assert_eq!(server.command_calls("hdel"), 1);
    }
    assert_eq!(
        server.cmd(&["EXISTS", "leasehold:{native}:lock"]),
        redis::Value::Int(0)
    );

    // Someone waits on another connection: woken by the wake mode.
    let permit = holder
        .semaphore("native", 1)
        .ttl(ttl)
        .acquire()
        .await
        .unwrap();
    let waiter = tokio::spawn(async move {
        other
            .semaphore("native", 1)
            .ttl(ttl)
            .wait(Duration::from_secs(20))
            .acquire()
            .await
    });
    crate::semantics::until_in_line(&holder, "native", 1).await;
    server.cmd(&["CONFIG", "RESETSTAT"]);
    permit.release().await.unwrap();
    let next = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("the waiter was not woken by the release")
        .unwrap()
        .unwrap();
    // The wake mode ran (it hands the permit on: the waiter takes the
    // grant without an attempt of its own; its look again after
    // subscribing may also land after the reset).
    assert!(server.command_calls("evalsha") >= 1);
    next.release().await.unwrap();
}
