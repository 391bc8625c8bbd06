//! The lock family beside the exclusive lock: the counting semaphore
//! ([`LockClient::semaphore`](crate::LockClient::semaphore)), the
//! read-write lock ([`RwLock`]) and the all-or-nothing multi-key lock
//! ([`LockClient::lock_all`](crate::LockClient::lock_all)). Each is taken
//! through the usual [`LockRequest`] and held by the usual
//! [`LockGuard`](crate::LockGuard); what differs is the [`Shape`] of the
//! request, which becomes the kind of its Redis names
//! (`backend::family::Kind`, whose module documents the data layout and
//! the fairness rules).

use std::sync::Arc;

use crate::backend::LockKeys;
use crate::backend::family::{AllKeys, Kind};
use crate::error::LockError;
use crate::limits::validate_key;
use crate::request::{LockRequest, Shared};
use crate::telemetry::LeaseKind;

/// What a [`LockRequest`] asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Shape {
    /// The exclusive lock of the request's key.
    Lock,
    /// One permit of a counting semaphore of this many permits.
    Semaphore(u32),
    /// A read share of a read-write lock.
    Read,
    /// The write side of a read-write lock.
    Write,
    /// All of these lock keys (sorted, without duplicates), or none.
    All(Vec<String>),
    /// The leadership of the election named by the request's key: a plain
    /// lock under the election's own Redis names.
    Election,
}

impl Shape {
    /// Check the shape's own arguments (the key is checked by the request).
    pub(crate) fn validate(&self) -> Result<(), LockError> {
        match self {
            Shape::Semaphore(0) => Err(LockError::invalid(
                "permits",
                "a semaphore needs at least 1 permit",
            )),
            Shape::All(keys) if keys.is_empty() => Err(LockError::invalid(
                "keys",
                "lock_all needs at least one key",
            )),
            Shape::All(keys) => keys.iter().try_for_each(|key| validate_key(key)),
            _ => Ok(()),
        }
    }

    /// The `kind` label of its metrics (see [`crate::observability`]).
    pub(crate) fn lease_kind(&self) -> LeaseKind {
        match self {
            Shape::Lock => LeaseKind::Lock,
            Shape::Semaphore(_) => LeaseKind::Semaphore,
            Shape::Read => LeaseKind::Read,
            Shape::Write => LeaseKind::Write,
            Shape::All(_) => LeaseKind::All,
            Shape::Election => LeaseKind::Election,
        }
    }

    /// The Redis names of `key` (the first key of `lock_all`) for this shape.
    pub(crate) fn keys(&self, prefix: &str, key: &str) -> LockKeys {
        let kind = match self {
            Shape::Lock => return LockKeys::new(prefix, key),
            Shape::Election => return LockKeys::election(prefix, key),
            Shape::Semaphore(permits) => Kind::Semaphore { permits: *permits },
            Shape::Read => Kind::Read,
            Shape::Write => Kind::Write,
            Shape::All(keys) => Kind::All(Arc::new(AllKeys::new(
                keys.iter().map(|key| LockKeys::new(prefix, key)).collect(),
            ))),
        };
        LockKeys::of_kind(prefix, key, kind)
    }
}

/// The keys of `lock_all`, sorted, without duplicates: every caller takes
/// them in the same order, whatever order it names them in.
pub(crate) fn sorted_keys<I, S>(keys: I) -> Vec<String>
where
    I: IntoIterator<Item = S>,
    S: Into<String>,
{
    let mut keys: Vec<String> = keys.into_iter().map(Into::into).collect();
    keys.sort_unstable();
    keys.dedup();
    keys
}

/// A read-write lock: many readers at once, or one writer. Made by
/// [`LockClient::rw_lock`](crate::LockClient::rw_lock); a cheap handle
/// (cloning it clones the client's `Arc`).
///
/// A waiting writer is not starved: readers that come after it wait behind
/// it, first come first served across every client and instance.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), leasehold_core::LockError> {
/// use std::time::Duration;
/// let client = leasehold_core::LockClient::in_memory();
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lock_all_keys_are_sorted_and_unique() {
        assert_eq!(sorted_keys(["b", "a", "b"]), vec!["a", "b"]);
        assert!(Shape::All(Vec::new()).validate().is_err());
        assert!(Shape::Semaphore(0).validate().is_err());
        assert!(Shape::Semaphore(1).validate().is_ok());
    }
}
