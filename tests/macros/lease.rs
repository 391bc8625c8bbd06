//! A body never outlives its lease: lost (FLUSHALL, with `renew`) or past
//! its validity (without `renew`), it is dropped at its next await point and
//! the function returns `Lost`; with `renew`, a long body finishes.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use leasehold::{LockClient, distributed_lock};
use tokio::sync::oneshot;

use crate::common::{AppError, assert_lost, held_locks, memory_clients, redis_client, within};
use crate::support::RedisServer;

/// Far longer than any lease below: the body can only end by being dropped.
const FOREVER: Duration = Duration::from_secs(3600);

#[distributed_lock(key = "flushed", ttl = "600ms", renew, client = client)]
async fn renewed_job(
    client: &LockClient,
    entered: oneshot::Sender<()>,
    finished: &AtomicBool,
) -> Result<(), AppError> {
    let _ = entered.send(());
    tokio::time::sleep(FOREVER).await;
    finished.store(true, Ordering::SeqCst);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flushall_while_running_aborts_the_body() {
    let server = RedisServer::start();
    let client = redis_client(&server).await;
    let finished = AtomicBool::new(false);
    let (entered, body_started) = oneshot::channel();
    let flush = async {
        body_started.await.expect("the body started");
        assert_eq!(
            held_locks(&server),
            vec![crate::common::lock_key("flushed")]
        );
        server.flushall();
    };
    let (result, ()) = within("renewed_job", async {
        tokio::join!(renewed_job(&client, entered, &finished), flush)
    })
    .await;
    assert_lost(result, "flushed");
    assert!(
        !finished.load(Ordering::SeqCst),
        "the code after the await ran"
    );
}

#[distributed_lock(key = "slow", ttl = "300ms", client = client)]
async fn unrenewed_slow_job(client: &LockClient, finished: &AtomicBool) -> Result<(), AppError> {
    tokio::time::sleep(FOREVER).await;
    finished.store(true, Ordering::SeqCst);
    Ok(())
}

/// `ttl` well below the body's duration, renewed every ttl/3.
#[distributed_lock(key = "slow-renewed", ttl = "1s", renew, client = client)]
async fn renewed_slow_job(client: &LockClient, finished: &AtomicBool) -> Result<u32, AppError> {
    tokio::time::sleep(Duration::from_millis(2500)).await;
    finished.store(true, Ordering::SeqCst);
    Ok(7)
}

async fn body_stops_at_validity_unless_renewed(client: LockClient) {
    let finished = AtomicBool::new(false);
    let result = within("unrenewed", unrenewed_slow_job(&client, &finished)).await;
    assert_lost(result, "slow");
    assert!(
        !finished.load(Ordering::SeqCst),
        "the body outlived its lease"
    );

    let result = within("renewed", renewed_slow_job(&client, &finished)).await;
    assert_eq!(result.unwrap(), 7);
    assert!(finished.load(Ordering::SeqCst));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn body_stops_at_validity_unless_renewed_redis() {
    let server = RedisServer::start();
    body_stops_at_validity_unless_renewed(redis_client(&server).await).await;
    assert!(held_locks(&server).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn body_stops_at_validity_unless_renewed_memory() {
    let client = memory_clients(1).remove(0);
    body_stops_at_validity_unless_renewed(client).await;
}

#[distributed_lock(key = "max-hold", ttl = "300ms", renew, max_hold = "600ms", client = client)]
async fn bounded_job(client: &LockClient, finished: &AtomicBool) -> Result<(), AppError> {
    tokio::time::sleep(FOREVER).await;
    finished.store(true, Ordering::SeqCst);
    Ok(())
}

/// `max_hold`: renewal stops, the lease runs out, the body is dropped with
/// `Lost { cause: MaxHold }`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_hold_drops_a_renewed_body() {
    let server = RedisServer::start();
    let client = redis_client(&server).await;
    let finished = AtomicBool::new(false);
    let result = within("bounded_job", bounded_job(&client, &finished)).await;
    match result {
        Err(AppError::Lock(leasehold::LockError::Lost { key, cause })) => {
            assert_eq!(key, "max-hold");
            assert_eq!(cause, leasehold::LostCause::MaxHold);
        }
        other => panic!("expected Lost(MaxHold), got {other:?}"),
    }
    assert!(!finished.load(Ordering::SeqCst));
}
