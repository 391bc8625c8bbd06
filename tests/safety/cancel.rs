//! Issue 10 #2, #3, #4 (SPEC 11): every public future may be dropped at any
//! await point, leaving no lock nobody will release, no place in line, no
//! subscription.

use std::time::Duration;

use redis::Value;

use crate::common::{
    channel_name, connect, debuggable, eventually, exists, lock_name, places_in_line, places_name,
    stall, stall_over, subscribers, warm_up,
};
use crate::support::RedisServer;

/// #2: a waiter dropped (`timeout`) while its first attempt is in flight on
/// a slow server leaves no place in line: once the holder releases, another
/// client gets the lock at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "issue 10 #2: the dropped waiter's token stays first in line; try_acquire from another client gets None for the holder's remaining TTL + 2 s"]
async fn a_waiter_dropped_mid_attempt_leaves_no_place_in_line() {
    let server = debuggable(&[]);
    let (holder, waiter, other) = (
        connect(&server).await,
        connect(&server).await,
        connect(&server).await,
    );
    let guard = holder
        .lock("ghost")
        .ttl(Duration::from_secs(8))
        .acquire()
        .await
        .expect("holder acquires");

    let stalled = stall(&server, Duration::from_millis(1500));
    let dropped = tokio::time::timeout(
        Duration::from_millis(300),
        waiter
            .lock("ghost")
            .ttl(Duration::from_secs(8))
            .wait(Duration::from_secs(30))
            .acquire(),
    )
    .await;
    assert!(
        dropped.is_err(),
        "the waiter was not in flight: {dropped:?}"
    );
    stall_over(stalled).await;

    // The server has now run the dropped attempt; the cleanup follows it.
    let left = eventually(Duration::from_secs(2), || {
        places_in_line(&server, "ghost") == 0
    })
    .await;
    guard.release().await.expect("holder releases");
    let free = eventually(Duration::from_secs(2), || {
        !exists(&server, &lock_name("ghost"))
    })
    .await;
    let got = other
        .lock("ghost")
        .try_acquire()
        .await
        .expect("try_acquire");
    assert!(
        left,
        "the dropped waiter still has a place in line: {:?}",
        server.cmd(&["HGETALL", &places_name("ghost")])
    );
    assert!(free, "the released lock is still set");
    assert!(
        got.is_some(),
        "the free lock is kept for a waiter that was dropped"
    );
}

/// #3: an acquisition dropped while its command is in flight leaves no
/// orphaned lock: soon after the server ran it, the key is gone again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "issue 10 #3: the dropped acquisition's lock stays set, with no guard, for its full TTL (10 s)"]
async fn an_acquisition_dropped_in_flight_leaves_no_lock() {
    let server = debuggable(&[]);
    let (client, other) = (connect(&server).await, connect(&server).await);
    warm_up(&client).await;

    for (round, wait) in [Duration::ZERO, Duration::from_secs(5)]
        .into_iter()
        .enumerate()
    {
        let key = format!("orphan-{round}");
        let stalled = stall(&server, Duration::from_millis(1000));
        let dropped = tokio::time::timeout(
            Duration::from_millis(300),
            client
                .lock(key.clone())
                .ttl(Duration::from_secs(10))
                .wait(wait)
                .acquire(),
        )
        .await;
        assert!(
            dropped.is_err(),
            "the acquisition was not in flight: {dropped:?}"
        );
        stall_over(stalled).await;

        // Generous: cleanup reaches Redis within about one round trip.
        let gone = eventually(Duration::from_secs(3), || {
            !exists(&server, &lock_name(&key))
        })
        .await;
        assert!(
            gone,
            "round {round} (wait {wait:?}): the dropped acquisition left `{}` set, PTTL {:?}",
            lock_name(&key),
            server.cmd(&["PTTL", &lock_name(&key)])
        );
        let got = other
            .lock(key.clone())
            .try_acquire()
            .await
            .expect("try_acquire");
        assert!(got.is_some(), "round {round}: the lock is still taken");
    }
}

/// Subscribe to keyspace events of `key`'s places in line; when the first
/// one arrives (the waiter's first attempt took its place), SIGSTOP the
/// server, so that the waiter's next step (subscribing to the release
/// channel) hangs. Returns once armed; the handle joins after the pause.
fn pause_when_a_place_is_taken(server: &RedisServer, key: &str) -> std::thread::JoinHandle<()> {
    let mut con = server.connection().expect("connect for keyspace events");
    let channel = format!("__keyspace@0__:{}", places_name(key));
    let pid = server.pid().expect("server running") as libc::pid_t;
    let (armed_tx, armed_rx) = std::sync::mpsc::channel();
    let handle = std::thread::spawn(move || {
        let mut pubsub = con.as_pubsub();
        pubsub
            .subscribe(&channel)
            .expect("SUBSCRIBE keyspace channel");
        armed_tx.send(()).expect("armed");
        let _ = pubsub.get_message();
        // SAFETY: kill(2) on the test's own child process.
        unsafe { libc::kill(pid, libc::SIGSTOP) };
    });
    armed_rx.recv().expect("keyspace subscriber armed");
    handle
}

/// #4: a waiter dropped while subscribing to the release channel leaves no
/// subscription and no place in line (and the line works afterwards).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "issue 10 #4: the dropped waiter keeps its place in line and its subscription (PUBSUB NUMSUB stays 1)"]
async fn a_waiter_dropped_while_subscribing_leaks_nothing() {
    let server = RedisServer::start_with(&["--notify-keyspace-events", "Kh"]);
    let (holder, waiter, other) = (
        connect(&server).await,
        connect(&server).await,
        connect(&server).await,
    );

    // Round 0 starts the waiter client's release listener (connection
    // establishment is cancelled); round 1 cancels a SUBSCRIBE on the
    // running listener.
    for round in 0..2 {
        let key = format!("subscribe-{round}");
        // Warm-up for round 1: a completed wait, so the listener exists.
        if round == 1 {
            let held = holder
                .lock("warm-up")
                .acquire()
                .await
                .expect("warm-up hold");
            let wait = tokio::spawn({
                let waiter = waiter.clone();
                async move {
                    waiter
                        .lock("warm-up")
                        .wait(Duration::from_secs(10))
                        .acquire()
                        .await
                }
            });
            assert!(
                eventually(Duration::from_secs(5), || subscribers(&server, "warm-up")
                    == 1)
                .await
            );
            held.release().await.expect("warm-up release");
            let got = wait
                .await
                .expect("warm-up waiter")
                .expect("warm-up acquired");
            got.release().await.expect("warm-up waiter release");
        }

        let guard = holder
            .lock(key.clone())
            .ttl(Duration::from_secs(30))
            .acquire()
            .await
            .expect("holder acquires");
        let pauser = pause_when_a_place_is_taken(&server, &key);
        let dropped = tokio::time::timeout(
            Duration::from_millis(1000),
            waiter
                .lock(key.clone())
                .ttl(Duration::from_secs(30))
                .wait(Duration::from_secs(60))
                .acquire(),
        )
        .await;
        tokio::task::spawn_blocking(move || pauser.join().expect("pauser"))
            .await
            .expect("join pauser");
        server.resume();
        assert!(dropped.is_err(), "round {round}: not dropped: {dropped:?}");

        let clean = eventually(Duration::from_secs(3), || {
            subscribers(&server, &key) == 0 && places_in_line(&server, &key) == 0
        })
        .await;
        assert!(
            clean,
            "round {round}: after the waiter was dropped: {} subscriber(s) of {}, places {:?}, line {:?}",
            subscribers(&server, &key),
            channel_name(&key),
            server.cmd(&["HGETALL", &places_name(&key)]),
            server.cmd(&["LRANGE", &crate::common::queue_name(&key), "0", "-1"]),
        );

        // Nothing stands between the release and the next client.
        guard.release().await.expect("holder releases");
        let got = other
            .lock(key.clone())
            .try_acquire()
            .await
            .expect("try_acquire");
        assert!(
            got.is_some(),
            "round {round}: the free lock is kept for a dropped waiter"
        );
    }
    let channels = server.cmd(&["PUBSUB", "CHANNELS", "leasehold:*"]);
    assert_eq!(channels, Value::Array(vec![]), "leaked subscriptions");
}
