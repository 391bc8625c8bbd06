//! README, Guarantees: every public future may be dropped at any
//! await point, leaving no lock nobody will release, no place in line, no
//! subscription.

use std::time::Duration;

use leasehold::LockClient;
use redis::Value;
use tokio::time::Instant;

use crate::common::{
    channel_name, connect, debuggable, eventually, exists, lock_name, places_in_line, places_name,
    stall, stall_over, subscribers, warm_up,
};
use crate::support::RedisServer;

/// #2: a waiter dropped (`timeout`) while its first attempt is in flight on
/// a slow server leaves no place in line: once the holder releases, another
/// client gets the lock at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
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
/// channel) hangs. Returns once armed; the receiver hears when the server
/// is stopped.
fn pause_when_a_place_is_taken(server: &RedisServer, key: &str) -> std::sync::mpsc::Receiver<()> {
    let mut con = server.connection().expect("connect for keyspace events");
    let channel = format!("__keyspace@0__:{}", places_name(key));
    let pid = server.pid().expect("server running") as libc::pid_t;
    let (armed_tx, armed_rx) = std::sync::mpsc::channel();
    let (paused_tx, paused_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut pubsub = con.as_pubsub();
        pubsub
            .subscribe(&channel)
            .expect("SUBSCRIBE keyspace channel");
        armed_tx.send(()).expect("armed");
        let _ = pubsub.get_message();
        // SAFETY: kill(2) on the test's own child process.
        unsafe { libc::kill(pid, libc::SIGSTOP) };
        let _ = paused_tx.send(());
        // Dropping `pubsub` unsubscribes, which waits for the server: only
        // after the test resumed it. Detached.
    });
    armed_rx.recv().expect("keyspace subscriber armed");
    paused_rx
}

/// #4: a waiter dropped while subscribing to the release channel leaves no
/// subscription and no place in line (and the line works afterwards).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
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
    let mut problems = Vec::new();
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
        let paused = tokio::task::spawn_blocking(move || {
            pauser.recv_timeout(Duration::from_secs(15)).is_ok()
        })
        .await
        .expect("pauser");
        server.resume();
        assert!(
            paused,
            "round {round}: the waiter never took a place in line"
        );
        assert!(dropped.is_err(), "round {round}: not dropped: {dropped:?}");

        let clean = eventually(Duration::from_secs(3), || {
            subscribers(&server, &key) == 0 && places_in_line(&server, &key) == 0
        })
        .await;
        if !clean {
            problems.push(format!(
                "round {round}: after the waiter was dropped: {} subscriber(s) of {}, places {:?}, line {:?}",
                subscribers(&server, &key),
                channel_name(&key),
                server.cmd(&["HGETALL", &places_name(&key)]),
                server.cmd(&["LRANGE", &crate::common::line_name(&key), "0", "-1"]),
            ));
        }

        // Nothing stands between the release and the next client.
        guard.release().await.expect("holder releases");
        let got = other
            .lock(key.clone())
            .try_acquire()
            .await
            .expect("try_acquire");
        if got.is_none() {
            problems.push(format!(
                "round {round}: the free lock is kept for a dropped waiter"
            ));
        }
    }
    let channels = server.cmd(&["PUBSUB", "CHANNELS", "leasehold:*"]);
    if channels != Value::Array(vec![]) {
        problems.push(format!("leaked subscriptions: {channels:?}"));
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// A `release()` dropped while its command is in flight still gives the
/// lock back: on a server that has the scripts cached (`EVALSHA` runs) and
/// on one that has not (as after any restart: `NOSCRIPT`, then the script
/// must still be sent).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_dropped_in_flight_still_releases() {
    let server = debuggable(&[]);
    let (client, other) = (connect(&server).await, connect(&server).await);
    for cache in ["warm", "cold"] {
        let key = format!("dropped-release-{cache}");
        let guard = client
            .lock(key.clone())
            .ttl(Duration::from_secs(20))
            .acquire()
            .await
            .expect("acquire");
        if cache == "cold" {
            server.cmd(&["SCRIPT", "FLUSH"]);
        } else {
            warm_up(&client).await;
        }
        let stalled = stall(&server, Duration::from_millis(1000));
        let dropped = tokio::time::timeout(Duration::from_millis(300), guard.release()).await;
        assert!(
            dropped.is_err(),
            "the release was not in flight: {dropped:?}"
        );
        stall_over(stalled).await;
        let gone = eventually(Duration::from_secs(3), || {
            !exists(&server, &lock_name(&key))
        })
        .await;
        assert!(
            gone,
            "{cache} script cache: a dropped release left the lock set (PTTL {:?})",
            server.cmd(&["PTTL", &lock_name(&key)])
        );
        let got = other
            .lock(key.clone())
            .try_acquire()
            .await
            .expect("try_acquire");
        assert!(got.is_some(), "{cache}: the lock is still taken");
    }
}

/// A `run` dropped while its body runs releases the lock, stops renewing,
/// and leaves no re-entry record: the same task's next acquisition is a
/// new one (a new fencing token).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_dropped_mid_body_releases_and_forgets() {
    let server = RedisServer::start();
    let client = connect(&server).await;
    let (entered_tx, entered_rx) = tokio::sync::oneshot::channel();
    let token = std::sync::Arc::new(std::sync::Mutex::new(None));
    let running = client
        .lock("dropped-run")
        .ttl(Duration::from_millis(900))
        .renew(true)
        .run({
            let token = token.clone();
            async move {
                *token.lock().expect("token") = leasehold::fencing_token();
                let _ = entered_tx.send(());
                std::future::pending::<()>().await;
            }
        });
    let dropped = tokio::time::timeout(Duration::from_secs(5), async {
        tokio::pin!(running);
        tokio::select! {
            _ = &mut running => panic!("the body never ends"),
            _ = entered_rx => {}
        }
        // `running` is dropped here, inside its body.
    })
    .await;
    assert!(dropped.is_ok(), "the body did not start");
    let first = token.lock().expect("token").expect("a token in the body");

    let gone = eventually(Duration::from_secs(3), || {
        !exists(&server, &lock_name("dropped-run"))
    })
    .await;
    assert!(
        gone,
        "a dropped run left the lock set (or kept renewing it)"
    );
    let again = client
        .lock("dropped-run")
        .ttl(Duration::from_secs(5))
        .acquire()
        .await
        .expect("acquire again");
    assert!(
        again.fencing_token() > first,
        "re-entered a dropped acquisition (token {} after {first})",
        again.fencing_token()
    );
    // Three renewal periods later: nothing renewed the dropped lease.
    again.release().await.expect("release");
    tokio::time::sleep(Duration::from_millis(900)).await;
    assert!(!exists(&server, &lock_name("dropped-run")));
}

/// An `extend()` dropped in flight leaves the guard usable: it still
/// releases its lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_extend_dropped_in_flight_leaves_a_usable_guard() {
    let server = debuggable(&[]);
    let client = connect(&server).await;
    let guard = client
        .lock("dropped-extend")
        .ttl(Duration::from_secs(20))
        .acquire()
        .await
        .expect("acquire");
    let stalled = stall(&server, Duration::from_millis(1000));
    let dropped = tokio::time::timeout(
        Duration::from_millis(300),
        guard.extend(Duration::from_secs(30)),
    )
    .await;
    assert!(
        dropped.is_err(),
        "the extend was not in flight: {dropped:?}"
    );
    stall_over(stalled).await;
    assert!(guard.is_held());
    guard
        .release()
        .await
        .expect("release after a dropped extend");
    assert!(!exists(&server, &lock_name("dropped-extend")));
}

/// A waiter whose subscription failed, dropped after
/// a later waiter of the same client subscribed, must not unsubscribe the
/// later one. The first waiter's release listener cannot connect (the
/// server is at `maxclients`), so it waits without announcements; then the
/// server accepts connections again and a second waiter subscribes; then
/// the first is cancelled. The second must still hear the holder's release
/// (another client's), long before the holder's lease (30 s) would end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_subscription_does_not_unsubscribe_a_later_waiter() {
    let server = RedisServer::start();
    // Kept open: the only way in while the server refuses new clients.
    let mut admin = server.connection().expect("admin connection");
    let holder = connect(&server).await;
    let waiters = LockClient::builder()
        .connect_timeout(Duration::from_millis(500))
        .connect(&server.url())
        .await
        .expect("connect the waiters' client");
    let key = "sub-after-failure";
    let held = holder
        .lock(key)
        .ttl(Duration::from_secs(30))
        .acquire()
        .await
        .expect("holder acquires");

    // No new connection: the first waiter's listener cannot start.
    let config = |admin: &mut redis::Connection, max: &str| {
        redis::cmd("CONFIG")
            .arg("SET")
            .arg("maxclients")
            .arg(max)
            .query::<()>(admin)
            .expect("CONFIG SET maxclients");
    };
    let rejected = |admin: &mut redis::Connection| -> u64 {
        let info: String = redis::cmd("INFO")
            .arg("stats")
            .query(admin)
            .expect("INFO stats");
        info.lines()
            .find_map(|l| l.strip_prefix("rejected_connections:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    };
    config(&mut admin, "1");
    let first = wait_in(&waiters, key, Duration::from_secs(60));
    let deadline = Instant::now() + Duration::from_secs(10);
    while rejected(&mut admin) == 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        rejected(&mut admin) > 0,
        "the listener never tried to connect"
    );
    // Let the failed start be reported to the first waiter.
    tokio::time::sleep(Duration::from_millis(700)).await;
    config(&mut admin, "10000");
    assert_eq!(subscribers(&server, key), 0, "the first waiter subscribed");

    let second = wait_in(&waiters, key, Duration::from_secs(20));
    assert!(
        eventually(Duration::from_secs(10), || subscribers(&server, key) == 1).await,
        "the second waiter never subscribed"
    );
    assert!(!first.is_finished(), "the first waiter ended early");
    first.abort();
    assert!(first.await.is_err_and(|e| e.is_cancelled()));

    // A barrier through the listener: a third waiter's subscription is
    // acknowledged after the first waiter's leaving was handled.
    let barrier = holder
        .lock("barrier")
        .ttl(Duration::from_secs(30))
        .acquire()
        .await
        .expect("barrier hold");
    let third = wait_in(&waiters, "barrier", Duration::from_secs(20));
    assert!(
        eventually(Duration::from_secs(10), || subscribers(&server, "barrier")
            == 1)
        .await,
        "the barrier waiter never subscribed"
    );
    let still = subscribers(&server, key);

    held.release().await.expect("holder releases");
    let got = tokio::time::timeout(Duration::from_secs(10), second).await;
    assert_eq!(
        still, 1,
        "the cancelled first waiter unsubscribed the second waiter's channel"
    );
    let guard = got
        .expect("the second waiter was not woken by the release")
        .expect("second waiter task")
        .expect("the second waiter gets the lock");
    guard.release().await.expect("second waiter releases");
    barrier.release().await.expect("barrier release");
    let _ = third.await;
}

/// A task waiting up to `wait` for `key` on `client` (30 s lease).
fn wait_in(
    client: &LockClient,
    key: &'static str,
    wait: Duration,
) -> tokio::task::JoinHandle<Result<leasehold::LockGuard, leasehold::LockError>> {
    let client = client.clone();
    tokio::spawn(async move {
        client
            .lock(key)
            .ttl(Duration::from_secs(30))
            .wait(wait)
            .acquire()
            .await
    })
}
