//! Re-entry only for the holder (README, Guarantees). A guard moved to
//! another task is that task's; the acquiring task's next acquisition waits.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use crate::common::{connect, lock_name};
use crate::support::RedisServer;

/// The dispatcher pattern: take `jobs`, hand the guard to a spawned worker,
/// take `jobs` again (waiting). The second acquisition must not succeed
/// while the worker still holds the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guard_moved_to_a_worker_makes_the_dispatcher_wait() {
    let server = RedisServer::start();
    let client = connect(&server).await;
    let busy = Arc::new(AtomicBool::new(false));
    let overlaps = Arc::new(AtomicUsize::new(0));

    let dispatcher = tokio::spawn({
        let (client, busy, overlaps) = (client.clone(), busy.clone(), overlaps.clone());
        async move {
            let mut workers = Vec::new();
            for _ in 0..3 {
                let guard = client
                    .lock("jobs")
                    .ttl(Duration::from_secs(10))
                    .wait(Duration::from_secs(10))
                    .acquire()
                    .await
                    .expect("dispatcher acquires jobs");
                if busy.load(Ordering::SeqCst) {
                    overlaps.fetch_add(1, Ordering::SeqCst);
                }
                // Marked busy before the guard leaves this task.
                busy.store(true, Ordering::SeqCst);
                let busy = busy.clone();
                workers.push(tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_millis(400)).await;
                    busy.store(false, Ordering::SeqCst);
                    guard.release().await.expect("worker releases jobs");
                }));
            }
            for worker in workers {
                worker.await.expect("worker");
            }
        }
    });
    tokio::time::timeout(Duration::from_secs(30), dispatcher)
        .await
        .expect("dispatcher finished")
        .expect("dispatcher task");
    assert_eq!(
        overlaps.load(Ordering::SeqCst),
        0,
        "the dispatcher acquired `jobs` while a worker still held it"
    );
    assert!(!crate::common::exists(&server, &lock_name("jobs")));
}

/// Same-task nesting still re-enters without a round trip: inside a `run`
/// body, a nested `run` of the same key completes while Redis is frozen
/// (SIGSTOP), with the outer token, and only the outer one releases.
///
/// (Nesting two plain `acquire()`s is deliberately not asserted: from the
/// library's side it is the same sequence of calls as the dispatcher
/// above, whose second acquisition must wait.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn same_task_nesting_re_enters_without_a_round_trip() {
    let server = RedisServer::start();
    let client = connect(&server).await;
    let inner_client = client.clone();
    let frozen = &server;
    let (outer, inner, held_after_inner) = client
        .lock("nested")
        .ttl(Duration::from_secs(10))
        .run(async move {
            let outer = leasehold::fencing_token();
            frozen.pause();
            let inner = tokio::time::timeout(
                Duration::from_secs(5),
                inner_client
                    .lock("nested")
                    .ttl(Duration::from_secs(10))
                    .wait(Duration::from_secs(1))
                    .run(async { leasehold::fencing_token() }),
            )
            .await;
            frozen.resume();
            let held_after_inner = crate::common::exists(frozen, &lock_name("nested"));
            (outer, inner, held_after_inner)
        })
        .await
        .expect("outer run");
    let inner = inner
        .expect("the nested run waited for the frozen server: it made a round trip")
        .expect("the nested run re-enters");
    assert!(outer.is_some());
    assert_eq!(inner, outer);
    assert!(held_after_inner, "the inner run gave the lock back");
    assert!(!crate::common::exists(&server, &lock_name("nested")));
}

/// Same as above through `run` bodies nested in one task (what
/// `#[distributed_lock]` functions calling each other do).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nested_run_bodies_re_enter() {
    let server = RedisServer::start();
    let client = connect(&server).await;
    let inner_client = client.clone();
    let tokens = client
        .lock("nested-run")
        .ttl(Duration::from_secs(10))
        .run(async move {
            let outer = leasehold::fencing_token();
            let inner = tokio::time::timeout(
                Duration::from_secs(5),
                inner_client
                    .lock("nested-run")
                    .ttl(Duration::from_secs(10))
                    .run(async { leasehold::fencing_token() }),
            )
            .await
            .expect("nested run did not complete")
            .expect("nested run re-enters");
            (outer, inner)
        })
        .await
        .expect("outer run");
    assert!(tokens.0.is_some());
    assert_eq!(tokens.0, tokens.1);
    assert!(!crate::common::exists(&server, &lock_name("nested-run")));
}

/// The outer token, and the inner call's outcome (`None`: it waited for the
/// frozen server, so it made a round trip).
type NestedOutcome = (
    Option<u64>,
    Option<Result<Option<u64>, leasehold::LockError>>,
);

#[leasehold::distributed_lock(key = "nested-attr", ttl = "10s", client = client)]
async fn outer_job(
    client: &leasehold::LockClient,
    server: &RedisServer,
) -> Result<NestedOutcome, leasehold::LockError> {
    let outer = leasehold::fencing_token();
    server.pause();
    let inner = tokio::time::timeout(Duration::from_secs(5), inner_job(client)).await;
    server.resume();
    Ok((outer, inner.ok()))
}

#[leasehold::distributed_lock(key = "nested-attr", ttl = "10s", client = client)]
async fn inner_job(client: &leasehold::LockClient) -> Result<Option<u64>, leasehold::LockError> {
    Ok(leasehold::fencing_token())
}

/// Nested `#[distributed_lock]` functions in one task re-enter with no
/// round trip (the inner call completes while Redis is frozen).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nested_attribute_calls_re_enter_without_a_round_trip() {
    let server = RedisServer::start();
    let client = connect(&server).await;
    let (outer, inner) = outer_job(&client, &server)
        .await
        .expect("nested attribute calls");
    let inner = inner
        .expect("the inner call waited for the frozen server: it made a round trip")
        .expect("the inner call re-enters");
    assert!(outer.is_some());
    assert_eq!(outer, inner);
    assert!(!crate::common::exists(&server, &lock_name("nested-attr")));
}
