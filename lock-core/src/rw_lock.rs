//! The read-write lock handle ([`RwLock`]): many readers at once, or one
//! writer, each side taken through the usual [`LockRequest`] and held by
//! the usual [`LockGuard`](crate::LockGuard). The semaphore and `lock_all`
//! are requests of their own shape too (see `shape.rs`), made by
//! [`LockClient`](crate::LockClient) directly.

use std::sync::Arc;

use crate::request::{LockRequest, Shared};
use crate::shape::Shape;

/// A read-write lock: many readers at once, or one writer. Made by
/// [`LockClient::rw_lock`](crate::LockClient::rw_lock); a cheap handle
/// (cloning it clones the client's `Arc`).
///
/// A waiting writer is not starved: readers that come after it wait behind
/// it, first come first served across every client and instance.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), leasehold::LockError> {
/// use std::time::Duration;
/// let client = leasehold::LockClient::in_memory();
/// let doc = client.rw_lock("doc:rw-example");
///
/// let first = doc.read().acquire().await?;
/// let second = doc.read().acquire().await?;            // readers share
/// assert!(doc.write().try_acquire().await?.is_none()); // the writer waits for them
/// first.release().await?;
/// second.release().await?;
/// let writer = doc.write().wait(Duration::from_secs(1)).acquire().await?;
/// # writer.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct RwLock {
    client: Arc<Shared>,
    key: String,
}

impl std::fmt::Debug for RwLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RwLock").field("key", &self.key).finish()
    }
}

impl RwLock {
    pub(crate) fn new(client: Arc<Shared>, key: String) -> RwLock {
        RwLock { client, key }
    }

    /// The key as given (without prefix).
    pub fn key(&self) -> &str {
        &self.key
    }

    /// A request for a read share: granted while no writer holds the lock
    /// or waits before it.
    pub fn read(&self) -> LockRequest {
        LockRequest::shaped(self.client.clone(), self.key.clone(), Shape::Read)
    }

    /// A request for the write side: granted when nobody holds the lock and
    /// nobody waits before it.
    pub fn write(&self) -> LockRequest {
        LockRequest::shaped(self.client.clone(), self.key.clone(), Shape::Write)
    }
}
