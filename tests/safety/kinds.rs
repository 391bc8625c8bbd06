//! Kinds never mix (README, Guarantees): a key used as a semaphore or rw
//! lock stays one while anyone holds it or waits in its line. A plain lock
//! (fast path or script) or a `lock_all` asking for it is `WrongType` at
//! once, whatever its `wait`, and never slips in between the last release
//! and the next waiter's grant.

use std::time::Duration;

use leasehold::{LockClient, LockError, LockGuard};
use tokio::time::Instant;

use crate::common::{channel_name, connect, eventually, exists, line_name, lock_name, warm_up};
use crate::support::RedisServer;

/// The moment the family key is free with someone in its line: every plain
/// form is refused, and the waiter is served first.
async fn nobody_slips_past(
    client: &LockClient,
    other: &LockClient,
    server: &RedisServer,
    rw: bool,
) {
    let key = if rw { "kinds-rw" } else { "kinds-sem" };
    let take = |c: &LockClient| {
        if rw {
            c.rw_lock(key).write()
        } else {
            c.semaphore(key, 1)
        }
    };
    let held = take(client)
        .ttl(Duration::from_secs(20))
        .acquire()
        .await
        .expect("the family holder");
    let waiter = tokio::spawn({
        let request = take(other)
            .ttl(Duration::from_secs(20))
            .wait(Duration::from_secs(15));
        async move { request.acquire().await }
    });
    let line = line_name(key);
    assert!(
        eventually(Duration::from_secs(5), || exists(server, &line)).await,
        "the family waiter takes its place in line"
    );
    // Given back while its waiter is woken, the plain forms race it.
    held.release().await.expect("the holder releases");
    let plain = client.lock(key).try_acquire().await;
    let all = client.lock_all([key, "kinds-other"]).try_acquire().await;
    assert!(
        matches!(plain, Err(LockError::WrongType { .. })),
        "a plain lock slipped in or was told something else: {plain:?}"
    );
    assert!(
        matches!(all, Err(LockError::WrongType { .. })),
        "a lock_all slipped in or was told something else: {all:?}"
    );
    let served: LockGuard = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("the waiter is served at once, not after a plain lease")
        .expect("task")
        .expect("the waiter, first in line, gets its grant");
    served.release().await.expect("the waiter releases");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_lock_never_slips_past_a_semaphore_or_rw_waiter() {
    let server = RedisServer::start();
    let client = connect(&server).await;
    let other = connect(&server).await;
    warm_up(&client).await;
    for rw in [false, true] {
        for _ in 0..5 {
            nobody_slips_past(&client, &other, &server, rw).await;
        }
    }
}

/// `WrongType` cannot clear by itself within a wait: it is returned at
/// once, not after the wait budget (and so is `InvalidArgument`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_kind_is_refused_at_once_whatever_the_wait() {
    let server = RedisServer::start();
    let client = connect(&server).await;
    let permit = client
        .semaphore("kind-wait", 2)
        .ttl(Duration::from_secs(20))
        .acquire()
        .await
        .expect("a permit");
    let wait = Duration::from_secs(5);
    let started = Instant::now();
    let plain = client.lock("kind-wait").wait(wait).acquire().await;
    let took = started.elapsed();
    assert!(
        matches!(plain, Err(LockError::WrongType { .. })),
        "{plain:?}"
    );
    // Not a speed bound: far below the wait budget means "not retried".
    assert!(
        took < wait / 2,
        "WrongType came after {took:?} of a {wait:?} wait"
    );
    let started = Instant::now();
    let writer = client
        .rw_lock("kind-wait")
        .write()
        .wait(wait)
        .acquire()
        .await;
    assert!(
        matches!(writer, Err(LockError::WrongType { .. })),
        "{writer:?}"
    );
    assert!(started.elapsed() < wait / 2);
    permit.release().await.expect("release");
}

/// A fast plain acquisition's `SET` of a moment on a semaphore's key, while
/// the semaphore's waiter is first in line (the plain lock's script gives
/// the key back and wakes that waiter with `again:`), is no reason to tell
/// another acquisition of the semaphore that the key is a plain lock's: the
/// key is still the semaphore's. It is busy for that moment, and served.
/// (A finding of the model of kinds never mixing, lock-model's family.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_set_of_a_moment_refuses_no_acquisition_of_the_family() {
    let server = RedisServer::start();
    let client = connect(&server).await;
    let other = connect(&server).await;
    warm_up(&client).await;
    let key = "kinds-moment";
    let ttl = Duration::from_secs(20);
    let held = client
        .semaphore(key, 1)
        .ttl(ttl)
        .acquire()
        .await
        .expect("the holder");
    let waiter = tokio::spawn({
        let request = other
            .semaphore(key, 1)
            .ttl(ttl)
            .wait(Duration::from_secs(15));
        async move { request.acquire().await }
    });
    let line = line_name(key);
    assert!(
        eventually(Duration::from_secs(5), || exists(&server, &line)).await,
        "the waiter takes its place in line"
    );
    // The moment: the permit given back (the holders hash emptied, as the
    // native release's HDEL leaves it), and a fast plain SET on the key.
    let lock = lock_name(key);
    server.cmd(&["DEL", &lock]);
    let plain = format!("{}:plain", "0".repeat(32));
    server.cmd(&["SET", &lock, &plain, "PX", "5000"]);
    let one_try = client.semaphore(key, 1).try_acquire().await;
    assert!(
        matches!(&one_try, Ok(None)),
        "a one-try acquisition in the moment is busy, not refused: {one_try:?}"
    );
    let newcomer = tokio::spawn({
        let request = client
            .semaphore(key, 1)
            .ttl(ttl)
            .wait(Duration::from_secs(15));
        async move { request.acquire().await }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !newcomer.is_finished(),
        "a waiting acquisition in the moment is answered: {:?}",
        newcomer.await
    );
    // The plain lock's script gives the key back and wakes the first in
    // line (acquire_contended.lua).
    let first = match server.cmd(&["LINDEX", &line, "0"]) {
        redis::Value::BulkString(b) => String::from_utf8(b).expect("a token"),
        other => panic!("the first in line: {other:?}"),
    };
    server.cmd(&["DEL", &lock]);
    server.cmd(&["PUBLISH", &channel_name(key), &format!("again:{first}")]);
    let served: LockGuard = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("the waiter is served at once")
        .expect("task")
        .expect("the waiter, first in line, gets its permit");
    served.release().await.expect("the waiter releases");
    let next: LockGuard = tokio::time::timeout(Duration::from_secs(5), newcomer)
        .await
        .expect("the newcomer is served after the waiter")
        .expect("task")
        .expect("the newcomer gets its permit, not WrongType");
    next.release().await.expect("the newcomer releases");
    drop(held);
}
