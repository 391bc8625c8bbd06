//! Helpers shared by the tests of this binary.

use std::future::Future;
use std::num::ParseIntError;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use leasehold::{LockClient, LockError};

use crate::support::RedisServer;

/// How long any one step may take before the test is declared hung.
pub const HANG: Duration = Duration::from_secs(30);

/// `fut`, or a panic naming `what` if it takes longer than [`HANG`].
pub async fn within<F: Future>(what: &str, fut: F) -> F::Output {
    match tokio::time::timeout(HANG, fut).await {
        Ok(output) => output,
        Err(_) => panic!("{what}: still running after {HANG:?}"),
    }
}

/// The error type of the annotated functions under test.
#[derive(Debug)]
pub enum AppError {
    Lock(LockError),
    Parse(ParseIntError),
}

impl From<LockError> for AppError {
    fn from(e: LockError) -> Self {
        AppError::Lock(e)
    }
}

impl From<ParseIntError> for AppError {
    fn from(e: ParseIntError) -> Self {
        AppError::Parse(e)
    }
}

impl AppError {
    /// The lock error inside, or a panic describing what it was instead.
    #[track_caller]
    pub fn lock(self) -> LockError {
        match self {
            AppError::Lock(e) => e,
            other => panic!("expected a lock error, got {other:?}"),
        }
    }
}

/// Asserts `result` is `Err(AppError::Lock(LockError::Busy { key }))`.
#[track_caller]
pub fn assert_busy<T: std::fmt::Debug>(result: Result<T, AppError>, key: &str) {
    match result {
        Err(AppError::Lock(LockError::Busy { key: k })) => assert_eq!(k, key),
        other => panic!("expected Busy on `{key}`, got {other:?}"),
    }
}

/// Asserts `result` is `Err(AppError::Lock(LockError::Lost { key }))`.
#[track_caller]
pub fn assert_lost<T: std::fmt::Debug>(result: Result<T, AppError>, key: &str) {
    match result {
        Err(AppError::Lock(LockError::Lost { key: k, .. })) => assert_eq!(k, key),
        other => panic!("expected Lost on `{key}`, got {other:?}"),
    }
}

/// A new client of `server` (its own connections, watchdog, reentrancy),
/// as on a separate instance of a service.
pub async fn redis_client(server: &RedisServer) -> LockClient {
    within("connect", LockClient::connect(&server.url()))
        .await
        .expect("connect to the test redis-server")
}

/// `n` clients of `server`.
pub async fn redis_clients(server: &RedisServer, n: usize) -> Vec<LockClient> {
    let mut clients = Vec::with_capacity(n);
    for _ in 0..n {
        clients.push(redis_client(server).await);
    }
    clients
}

/// `n` in-memory clients sharing one store under a prefix of this call's
/// own (in-memory clients of one process share their locks, like clients of
/// one Redis server; the prefix keeps tests running in parallel apart).
pub fn memory_clients(n: usize) -> Vec<LockClient> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let prefix = format!("macros{}:", NEXT.fetch_add(1, Ordering::Relaxed));
    (0..n)
        .map(|_| LockClient::builder().prefix(prefix.clone()).in_memory())
        .collect()
}

/// The Redis key holding the lock `name` (default prefix).
pub fn lock_key(name: &str) -> String {
    format!("leasehold:{{{name}}}:lock")
}

/// Every lock key currently in `server`, sorted.
pub fn held_locks(server: &RedisServer) -> Vec<String> {
    server.keys("leasehold:*:lock")
}

/// Reads "which locks does Redis hold right now" from inside a function body.
pub type Probe = dyn Fn() -> Vec<String> + Send + Sync;

/// A [`Probe`] of `server` (a blocking call, fine on a multi-thread runtime).
pub fn probe(server: &std::sync::Arc<RedisServer>) -> Box<Probe> {
    let server = server.clone();
    Box::new(move || held_locks(&server))
}
