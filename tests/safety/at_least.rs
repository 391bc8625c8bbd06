//! Fault #12 of the fault review (README, Guarantees): a release that shortens a lock's life (with
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
