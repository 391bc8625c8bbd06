//! `#[distributed_lock]` without `client = ...` before any
//! `leasehold::set_global_client`: every call fails with
//! `LockError::NoGlobalClient` through the fallback, the body does not run,
//! nothing panics. Then, once a global client is set, the same functions work.
//!
//! One test in a binary of its own: the global client is process-wide.

use std::sync::atomic::{AtomicUsize, Ordering};

use leasehold::{LockClient, LockError, distributed_lock};

#[derive(Debug)]
struct AppError(LockError);

impl From<LockError> for AppError {
    fn from(e: LockError) -> Self {
        AppError(e)
    }
}

#[distributed_lock(key = "no-global:<n>")]
async fn as_result(n: u32, runs: &AtomicUsize) -> Result<u32, AppError> {
    runs.fetch_add(1, Ordering::SeqCst);
    Ok(n)
}

#[distributed_lock(key = "no-global")]
async fn as_option(runs: &AtomicUsize) -> Option<u32> {
    runs.fetch_add(1, Ordering::SeqCst);
    Some(1)
}

#[distributed_lock(key = "no-global")]
async fn as_unit(runs: &AtomicUsize) {
    runs.fetch_add(1, Ordering::SeqCst);
}

#[tokio::test]
async fn without_a_global_client_calls_fail_through_the_fallback() {
    let runs = AtomicUsize::new(0);
    match as_result(1, &runs).await {
        Err(AppError(LockError::NoGlobalClient)) => {}
        other => panic!("expected NoGlobalClient, got {other:?}"),
    }
    assert_eq!(as_option(&runs).await, None);
    as_unit(&runs).await;
    assert_eq!(runs.load(Ordering::SeqCst), 0, "a body ran without a lock");

    leasehold::set_global_client(LockClient::in_memory());
    assert_eq!(as_result(2, &runs).await.unwrap(), 2);
    assert_eq!(as_option(&runs).await, Some(1));
    as_unit(&runs).await;
    assert_eq!(runs.load(Ordering::SeqCst), 3);
}
