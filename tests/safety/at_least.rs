//! README, Guarantees: a release that shortens a lock's life (with
//! `at_least`) announces when it ends, so waiters in other clients get the
//! lock then, not at the old expiry; and a served waiter leaves the line.

use std::time::Duration;

use tokio::time::Instant;

use crate::common::{connect, eventually, exists, lock_name, places_in_line};
use crate::support::RedisServer;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_early_release_with_at_least_hands_over_when_at_least_ends() {
    let server = RedisServer::start();
    let (a, b, c) = (
        connect(&server).await,
        connect(&server).await,
        connect(&server).await,
    );
    let ttl = Duration::from_secs(6);
    let at_least = Duration::from_secs(1);

    let started = Instant::now();
    let guard = a
        .lock("report")
        .ttl(ttl)
        .at_least(at_least)
        .acquire()
        .await
        .expect("A acquires");
    let waiter = tokio::spawn({
        let b = b.clone();
        async move {
            let got = b
                .lock("report")
                .ttl(ttl)
                .wait(Duration::from_secs(20))
                .acquire()
                .await;
            let at = Instant::now();
            // B is done at once: the lock must be free for others after.
            if let Ok(guard) = got {
                let token = guard.fencing_token();
                guard.release().await.expect("B releases");
                return Ok((at, token));
            }
            got.map(|_| (at, 0))
        }
    });
    assert!(
        eventually(Duration::from_secs(5), || places_in_line(&server, "report")
            >= 1)
        .await,
        "B did not take a place in line"
    );
    tokio::time::sleep(Duration::from_millis(200).saturating_sub(started.elapsed())).await;
    guard.release().await.expect("A releases early");
    assert!(
        exists(&server, &lock_name("report")),
        "at_least must keep the key until 1 s after acquisition"
    );

    // Correctness bound: well before the old expiry at 6 s.
    let bound = Duration::from_secs(4).saturating_sub(started.elapsed());
    let outcome = tokio::time::timeout(bound, waiter).await;
    let (b_at, _) = outcome
        .unwrap_or_else(|_| {
            panic!(
                "B still waits {:?} after A's acquisition (at_least {at_least:?}, ttl {ttl:?}); lock key PTTL {:?}",
                started.elapsed(),
                server.cmd(&["PTTL", &lock_name("report")])
            )
        })
        .expect("B's task")
        .expect("B acquires");
    assert!(
        b_at - started >= at_least - Duration::from_millis(50),
        "B got the lock at {:?}, before at_least ended",
        b_at - started
    );

    // B is done: nobody is in line and a third client gets it at once.
    assert_eq!(places_in_line(&server, "report"), 0);
    let third = c.lock("report").try_acquire().await.expect("try_acquire");
    assert!(third.is_some(), "the free lock is kept from a third client");
}

/// A renewal on its way when the holder releases
/// with `at_least` must not land after the release and reset the key to
/// the full TTL (it is still the holder's token, so renew.lua would
/// extend it). 120 rounds of 32 leases taken together, so that the
/// watchdog renews them in one batch (ttl / 3 = 100 ms after), each
/// released around that moment on a two-worker runtime; after each
/// release the key must expire with `at_least` (≤ 50 ms left), not a
/// whole lease (300 ms) later.
///
/// A race: before the fix, several releases per run were overtaken by
/// their renewal on the test machine, so this fails with a high
/// probability (not certainty) if the release stops waiting for a renewal
/// in flight.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewal_in_flight_does_not_outlive_a_release_with_at_least() {
    let server = std::sync::Arc::new(RedisServer::start());
    let client = connect(&server).await;
    let ttl = Duration::from_millis(300);
    let at_least = Duration::from_millis(150);
    let mut overtaken = Vec::new();
    for round in 0..120u64 {
        let leases: Vec<_> = (0..32u64)
            .map(|l| {
                let (client, server) = (client.clone(), server.clone());
                tokio::spawn(async move {
                    let key = format!("renewal-race-{round}-{l}");
                    let guard = client
                        .lock(key.clone())
                        .ttl(ttl)
                        .renew(true)
                        .at_least(at_least)
                        .acquire()
                        .await
                        .expect("acquire");
                    // 99.0 ms to 100.9 ms after the acquisition.
                    let offset = (round * 7 + l * 13) % 20;
                    tokio::time::sleep(Duration::from_micros(99_000 + offset * 100)).await;
                    guard.release().await.expect("release");
                    // Time for a renewal sent just after the release to land.
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    let name = lock_name(&key);
                    let left = tokio::task::spawn_blocking(move || server.cmd(&["PTTL", &name]))
                        .await
                        .expect("PTTL");
                    matches!(left, redis::Value::Int(ms) if ms > 100)
                        .then(|| format!("{key}: {left:?} ms left"))
                })
            })
            .collect();
        for lease in leases {
            overtaken.extend(lease.await.expect("lease task"));
        }
    }
    assert!(
        overtaken.is_empty(),
        "{} releases with at_least were overtaken by a renewal (key reset to the full TTL): {overtaken:?}",
        overtaken.len()
    );
}
