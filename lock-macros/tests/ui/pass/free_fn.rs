//! Free functions: the three supported return types, `?` and `return` in the body,
//! placeholders from parameters, every option, and the global client.
#![deny(warnings)]

use std::sync::atomic::{AtomicU32, Ordering};

use leasehold::distributed_lock;
use leasehold::{LockClient, LockError};

#[derive(Debug)]
enum AppError {
    Lock(LockError),
    Parse(std::num::ParseIntError),
}

impl From<LockError> for AppError {
    fn from(err: LockError) -> Self {
        Self::Lock(err)
    }
}

impl From<std::num::ParseIntError> for AppError {
    fn from(err: std::num::ParseIntError) -> Self {
        Self::Parse(err)
    }
}

static RUNS: AtomicU32 = AtomicU32::new(0);

/// A skip-if-locked job returning `()`.
#[distributed_lock(key = "report", ttl = "5m", at_least = "1m")]
async fn report() {
    RUNS.fetch_add(1, Ordering::SeqCst);
}

/// `?` converts through `From`, `return` leaves early, both with the declared type.
#[distributed_lock(key = "parse:<text>", ttl = "10s", renew, wait = "2s")]
pub async fn parse(text: &str) -> Result<u32, AppError> {
    if text.is_empty() {
        return Ok(0);
    }
    let n: u32 = text.parse()?;
    Ok(n * 2)
}

/// `Option` return: `None` when the lock is not obtained.
#[distributed_lock(key = "find:<id>:<<raw>>", ttl = "1m30s", wait = "1h2m3s500ms")]
async fn find(id: u64) -> Option<u64> {
    let doubled = id.checked_mul(2)?;
    Some(doubled)
}

/// Unused parameters other than those in the key, and a body ending in `return`.
#[distributed_lock(key = "draw:<date>:{")]
async fn draw(date: u32, _seed: u64) -> Result<Vec<u32>, AppError> {
    return Ok(vec![date]);
}

/// A body that outlives its ttl without `renew` is stopped: `Lost`.
#[distributed_lock(key = "slow", ttl = "100ms")]
async fn slow() -> Result<(), AppError> {
    tokio::time::sleep(std::time::Duration::from_millis(400)).await;
    Ok(())
}

#[distributed_lock(key = "busy:<id>")]
async fn busy_option(id: u64) -> Option<u64> {
    Some(id)
}

#[distributed_lock(key = "busy:<id>", ttl = "1s")]
async fn busy_result(id: u64) -> Result<u64, AppError> {
    Ok(id)
}

/// Nested calls in one task with the same key re-enter.
#[distributed_lock(key = "nested:<n>")]
async fn outer(n: u32) -> Option<u32> {
    inner(n).await.map(|m| m + 1)
}

#[distributed_lock(key = "nested:<n>")]
async fn inner(n: u32) -> Option<u32> {
    Some(n)
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    // No global client yet: the failure goes through the fallback, never a panic.
    assert!(matches!(
        parse("21").await,
        Err(AppError::Lock(LockError::NoGlobalClient))
    ));
    assert_eq!(find(1).await, None);
    report().await;
    assert_eq!(RUNS.load(Ordering::SeqCst), 0);

    let client = LockClient::in_memory();
    leasehold::set_global_client(client.clone());
    assert!(matches!(parse("21").await, Ok(42)));
    assert!(matches!(parse("").await, Ok(0)));
    assert!(matches!(parse("x").await, Err(AppError::Parse(e)) if !e.to_string().is_empty()));
    assert_eq!(find(21).await, Some(42));
    assert_eq!(find(u64::MAX).await, None);
    assert!(matches!(draw(7, 1).await, Ok(v) if v == [7]));
    report().await;
    assert_eq!(RUNS.load(Ordering::SeqCst), 1);
    // `at_least` keeps the key for a while after the first run: skipped.
    report().await;
    assert_eq!(RUNS.load(Ordering::SeqCst), 1);

    assert!(matches!(
        slow().await,
        Err(AppError::Lock(LockError::Lost { .. }))
    ));
    assert_eq!(outer(1).await, Some(2));

    // Busy: held by another task (the same task would re-enter).
    let (held_tx, held_rx) = tokio::sync::oneshot::channel();
    let (done_tx, done_rx) = tokio::sync::oneshot::channel::<()>();
    let holder_client = client.clone();
    let holder = tokio::spawn(async move {
        let guard = holder_client.lock("busy:5").acquire().await;
        let _ = held_tx.send(guard.is_ok());
        let _ = done_rx.await;
        drop(guard);
    });
    assert_eq!(held_rx.await.ok(), Some(true));
    assert_eq!(busy_option(5).await, None);
    assert!(matches!(
        busy_result(5).await,
        Err(AppError::Lock(LockError::Busy { .. }))
    ));
    let _ = done_tx.send(());
    let _ = holder.await;
    assert_eq!(busy_option(5).await, Some(5));
}
