//! Tests written the way a user of leasehold writes them, with the fault kit
//! (`leasehold::testing`, feature `testing`): no Redis server, tokio's
//! paused clock where time matters.
//!
//! - the HTTP service of `examples/axum_orders.rs` (compiled into this test
//!   as a module): 409 when another instance is paying the same order, 503
//!   when Redis is down, 503 and no payment recorded when the lock is lost
//!   mid-payment;
//! - a scheduled job with `#[distributed_lock(..., renew)]` that must stop
//!   cleanly when its lease is lost: stolen, expired, Redis restarted, Redis
//!   unreachable.

#[allow(dead_code)]
#[path = "../examples/axum_orders.rs"]
mod axum_orders;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use leasehold::testing::FaultyClient;
use leasehold::{LockClient, LockError, LostCause, distributed_lock};
use tokio::time::Instant;
use tower::ServiceExt;

use axum_orders::{Payments, app};

// ---------------------------------------------------------------------------
// The HTTP service
// ---------------------------------------------------------------------------

/// POST `path` to the service; the status and the JSON body.
async fn post(app: &Router, path: &str) -> (StatusCode, serde_json::Value) {
    let request = Request::post(path).body(Body::empty()).unwrap();
    let response = app.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
        .await
        .unwrap();
    (status, serde_json::from_slice(&bytes).unwrap())
}

fn service(locks: LockClient, payment_time: Duration) -> Router {
    app(Arc::new(Payments::new(locks, payment_time)))
}

#[tokio::test]
async fn an_order_another_instance_is_paying_answers_409() {
    let kit = FaultyClient::new();
    let app = service(kit.client.clone(), Duration::from_millis(5));

    // Another instance of the service is paying order 42 right now.
    let other_instance = kit.controls.another_client();
    let paying = other_instance.lock("order:42").acquire().await.unwrap();

    let (status, body) = post(&app, "/orders/42/pay").await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_eq!(body["key"], "order:42");
    // Another order is not affected.
    let (status, body) = post(&app, "/orders/43/pay").await;
    assert_eq!(status, StatusCode::OK, "{body}");

    // Once the other instance is done, ours pays.
    paying.release().await.unwrap();
    let (status, body) = post(&app, "/orders/42/pay").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["status"], "paid");
}

#[tokio::test]
async fn redis_down_answers_503_and_recovers() {
    let kit = FaultyClient::new();
    let app = service(kit.client.clone(), Duration::from_millis(5));

    kit.controls.set_unavailable(true);
    let (status, body) = post(&app, "/orders/7/pay").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert!(
        body["error"].as_str().unwrap().contains("unavailable"),
        "{body}"
    );

    kit.controls.heal();
    let (status, body) = post(&app, "/orders/7/pay").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["status"], "paid");
}

#[tokio::test(start_paused = true)]
async fn a_slow_redis_still_pays() {
    let kit = FaultyClient::new();
    let app = service(kit.client.clone(), Duration::from_millis(5));
    // 300 ms per call: acquire, release (on the paused clock: no real wait).
    kit.controls.set_delay(Duration::from_millis(300));
    let started = Instant::now();
    let (status, body) = post(&app, "/orders/8/pay").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(started.elapsed() >= Duration::from_millis(600));
}

#[tokio::test(start_paused = true)]
async fn a_lock_lost_mid_payment_answers_503_and_records_nothing() {
    let kit = FaultyClient::new();
    // The payment takes a minute; the lease (10 s) is renewed meanwhile.
    let app = service(kit.client.clone(), Duration::from_secs(60));

    let request = tokio::spawn({
        let app = app.clone();
        async move { post(&app, "/orders/9/pay").await }
    });
    tokio::time::sleep(Duration::from_secs(20)).await;
    // Two renewals went through; now someone else takes the lock.
    assert!(kit.controls.steal("order:9"));
    let (status, body) = request.await.unwrap();
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert!(body["error"].as_str().unwrap().contains("lost"), "{body}");

    // The interrupted payment was not recorded: paying again pays.
    assert!(kit.controls.expire("order:9"));
    let (status, body) = post(&app, "/orders/9/pay").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["status"], "paid");
}

// ---------------------------------------------------------------------------
// A scheduled job
// ---------------------------------------------------------------------------

#[derive(Debug)]
enum JobError {
    Lock(LockError),
}

impl From<LockError> for JobError {
    fn from(e: LockError) -> Self {
        JobError::Lock(e)
    }
}

/// A nightly report: one step a second for ten minutes, under a renewed
/// lease of 3 s. Counts its steps in `steps`.
#[distributed_lock(key = "nightly-report", ttl = "3s", renew, client = locks.clone())]
async fn nightly_report(locks: &LockClient, steps: &AtomicU32) -> Result<u32, JobError> {
    for _ in 0..600 {
        steps.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    Ok(steps.load(Ordering::SeqCst))
}

/// Runs the job, applies `fault` after `after`, and returns the job's
/// outcome, how long after the fault it returned, and the steps it made.
async fn job_with_fault(
    kit: &FaultyClient,
    after: Duration,
    fault: impl FnOnce(),
) -> (Result<u32, JobError>, Duration, u32) {
    let steps = AtomicU32::new(0);
    let job = nightly_report(&kit.client, &steps);
    tokio::pin!(job);
    // The job runs for `after`, then the fault strikes.
    let early = tokio::time::timeout(after, &mut job).await;
    assert!(early.is_err(), "the job ended before the fault: {early:?}");
    fault();
    let struck = Instant::now();
    let outcome = job.await;
    let stopped_after = struck.elapsed();
    let steps_at_return = steps.load(Ordering::SeqCst);
    // Its body is gone: no step after it returned.
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert_eq!(steps.load(Ordering::SeqCst), steps_at_return);
    (outcome, stopped_after, steps_at_return)
}

fn lost_cause(outcome: &Result<u32, JobError>) -> Option<LostCause> {
    match outcome {
        Err(JobError::Lock(LockError::Lost { key, cause })) => {
            assert_eq!(key, "nightly-report");
            Some(*cause)
        }
        _ => None,
    }
}

#[tokio::test(start_paused = true)]
async fn the_job_stops_when_its_lease_is_stolen() {
    let kit = FaultyClient::new();
    let controls = kit.controls.clone();
    let (outcome, stopped_after, steps) =
        job_with_fault(&kit, Duration::from_millis(10_500), || {
            assert!(controls.steal("nightly-report"));
        })
        .await;
    assert_eq!(
        lost_cause(&outcome),
        Some(LostCause::Refused),
        "{outcome:?}"
    );
    // Noticed at the next renewal (every ttl / 3 = 1 s), not ten minutes later.
    assert!(stopped_after <= Duration::from_secs(1), "{stopped_after:?}");
    assert!((11..=12).contains(&steps), "{steps} steps");
    // The stolen lock kept its expiry: 30 s later it is free again.
    assert!(!kit.controls.is_locked("nightly-report"));
}

#[tokio::test(start_paused = true)]
async fn while_stolen_the_next_run_skips() {
    let kit = FaultyClient::new();
    let guard = kit.client.lock("nightly-report").acquire().await.unwrap();
    assert!(kit.controls.steal("nightly-report"));
    // Someone else holds it now: the job skips (busy) and does not run.
    let steps = AtomicU32::new(0);
    let run = nightly_report(&kit.client, &steps).await;
    assert!(matches!(run, Err(JobError::Lock(LockError::Busy { .. }))));
    assert_eq!(steps.load(Ordering::SeqCst), 0);
    // And the old holder's release says it no longer held it.
    assert!(matches!(
        guard.release().await,
        Err(LockError::NotHeld { .. })
    ));
}

#[tokio::test(start_paused = true)]
async fn the_job_stops_when_its_lease_expires_under_it() {
    let kit = FaultyClient::new();
    let controls = kit.controls.clone();
    let (outcome, stopped_after, _) = job_with_fault(&kit, Duration::from_millis(4_500), || {
        assert!(controls.expire("nightly-report"));
    })
    .await;
    assert_eq!(
        lost_cause(&outcome),
        Some(LostCause::Refused),
        "{outcome:?}"
    );
    assert!(stopped_after <= Duration::from_secs(1), "{stopped_after:?}");
    // The lock is free again (the body released nothing it no longer had).
    assert!(!kit.controls.is_locked("nightly-report"));
}

#[tokio::test(start_paused = true)]
async fn the_job_stops_at_once_when_redis_restarts() {
    let kit = FaultyClient::new();
    let controls = kit.controls.clone();
    let (outcome, stopped_after, _) =
        job_with_fault(&kit, Duration::from_millis(2_500), || controls.restart()).await;
    assert_eq!(
        lost_cause(&outcome),
        Some(LostCause::Restarted),
        "{outcome:?}"
    );
    assert!(
        stopped_after < Duration::from_millis(100),
        "{stopped_after:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn the_job_stops_when_redis_is_unreachable_past_its_validity() {
    let kit = FaultyClient::new();
    let controls = kit.controls.clone();
    let (outcome, stopped_after, _) = job_with_fault(&kit, Duration::from_millis(5_500), || {
        controls.set_unavailable(true);
    })
    .await;
    assert_eq!(
        lost_cause(&outcome),
        Some(LostCause::Unreachable),
        "{outcome:?}"
    );
    // The last renewal (at 5 s) kept it valid until 8 s: lost then.
    assert!(stopped_after <= Duration::from_secs(3), "{stopped_after:?}");
    assert!(outcome.unwrap_err_lock().is_unavailable());
}

trait UnwrapLock {
    fn unwrap_err_lock(self) -> LockError;
}

impl UnwrapLock for Result<u32, JobError> {
    fn unwrap_err_lock(self) -> LockError {
        match self {
            Err(JobError::Lock(e)) => e,
            Ok(n) => panic!("the job finished ({n} steps)"),
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_second_instance_skips_while_the_first_runs() {
    let kit = FaultyClient::new();
    let other_instance = kit.controls.another_client();
    let (first_steps, second_steps) = (AtomicU32::new(0), AtomicU32::new(0));
    let first = nightly_report(&kit.client, &first_steps);
    let second = async {
        tokio::time::sleep(Duration::from_secs(1)).await;
        nightly_report(&other_instance, &second_steps).await
    };
    let (first, second) = tokio::join!(first, second);
    assert_eq!(first.unwrap(), 600);
    assert!(matches!(
        second,
        Err(JobError::Lock(LockError::Busy { .. }))
    ));
    assert_eq!(second_steps.load(Ordering::SeqCst), 0);
}

/// After `restart()`, a key asked for within its lease before it is closed
/// as a real client closes it: `Unavailable` (the 503 path) with about the
/// lease left, not `Busy`; a key nobody asked for is granted at once, and
/// the closed one opens when the lease could have run out.
#[tokio::test(start_paused = true)]
async fn a_restart_closes_the_keys_asked_for_within_their_lease() {
    let kit = FaultyClient::new();
    let ttl = Duration::from_secs(30);
    let held = kit
        .client
        .lock("ledger")
        .ttl(ttl)
        .acquire()
        .await
        .expect("held before the restart");
    kit.controls.restart();
    let other = kit.controls.another_client();
    let refused = other.lock("ledger").ttl(ttl).try_acquire().await;
    match &refused {
        Err(e) if e.is_unavailable() && !e.is_busy() => {
            let left = e.retry_after().expect("says when it reopens");
            assert!(left > ttl / 2 && left <= ttl, "{left:?}");
        }
        other => panic!("expected Unavailable with retry_after, got {other:?}"),
    }
    let fresh = other.lock("never-asked").try_acquire().await;
    assert!(matches!(fresh, Ok(Some(_))), "{fresh:?}");
    tokio::time::sleep(ttl + Duration::from_secs(1)).await;
    let reopened = other.lock("ledger").ttl(ttl).try_acquire().await;
    assert!(matches!(reopened, Ok(Some(_))), "{reopened:?}");
    drop(held);
}
