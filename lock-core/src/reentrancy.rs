//! Reentrancy: a task that already holds a lock (through the same client)
//! gets it again at once, with no round trip, and only the last of its
//! guards gives it back.
//!
//! The owner is the current tokio task, identified by its [`tokio::task::Id`]
//! (or, for the future a runtime's `block_on` drives directly, such as the
//! body of `#[tokio::main]` or `#[tokio::test]`, by the thread running it).
//! A task spawned by a holder is a different owner and waits like anyone
//! else.
//!
//! Why not a `tokio::task_local!`? A task-local exists only inside an explicit
//! `.scope(..)`, so a lock taken at the top of an ordinary task would not be
//! seen by a nested acquisition in the same task. Keying by task id gives
//! per-task state that works in every task, with no scope to set up; it is a
//! task-local in every sense that matters here.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex, MutexGuard, PoisonError, Weak};

use crate::lease::Lease;

/// Who holds a lease, for reentrancy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Owner {
    Task(tokio::task::Id),
    Thread(std::thread::ThreadId),
}

impl Owner {
    pub(crate) fn current() -> Owner {
        match tokio::task::try_id() {
            Some(id) => Owner::Task(id),
            None => Owner::Thread(std::thread::current().id()),
        }
    }
}

/// One guard of one owner, innermost last.
struct Entry {
    guard_id: u64,
    lease: Weak<Lease>,
}

static HELD: LazyLock<Mutex<HashMap<Owner, Vec<Entry>>>> = LazyLock::new(Default::default);

fn held() -> MutexGuard<'static, HashMap<Owner, Vec<Entry>>> {
    // Each update is a single push/retain: a panic cannot leave it half-done.
    HELD.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The lease `owner` holds on the lock named `name` through client
/// `client_id`, if it is still held (a lost lease is not re-entered: the next
/// acquisition takes a fresh one).
pub(crate) fn find(owner: Owner, client_id: u64, name: &str) -> Option<Arc<Lease>> {
    let held = held();
    held.get(&owner)?
        .iter()
        .rev()
        .filter_map(|entry| entry.lease.upgrade())
        .find(|lease| lease.client.id == client_id && lease.keys.name == name && lease.is_held())
}

/// Record a new guard (outermost or re-entry) of `lease` for its owner.
pub(crate) fn push(guard_id: u64, lease: &Arc<Lease>) {
    held().entry(lease.owner).or_default().push(Entry {
        guard_id,
        lease: Arc::downgrade(lease),
    });
}

/// Forget a guard (released or dropped).
pub(crate) fn remove(owner: Owner, guard_id: u64) {
    let mut held = held();
    if let Some(entries) = held.get_mut(&owner) {
        entries.retain(|e| e.guard_id != guard_id && e.lease.strong_count() > 0);
        if entries.is_empty() {
            held.remove(&owner);
        }
    }
}

/// The fencing token of the innermost lock the current task holds.
///
/// Inside a function annotated with `#[distributed_lock]` (or the body of
/// [`LockRequest::run`](crate::LockRequest::run)), this is the token of that
/// lock, to pass along to a storage layer that rejects stale writers.
/// `None` when the current task holds no lock (or only lost ones).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), leasehold_core::LockError> {
/// let client = leasehold_core::LockClient::in_memory();
/// assert_eq!(leasehold_core::fencing_token(), None);
/// let token = client
///     .lock("doc:fencing_token")
///     .run(async { leasehold_core::fencing_token() })
///     .await?;
/// assert!(token.is_some());
/// # Ok(()) }
/// ```
pub fn fencing_token() -> Option<u64> {
    let held = held();
    held.get(&Owner::current())?
        .iter()
        .rev()
        .filter_map(|entry| entry.lease.upgrade())
        .find(|lease| lease.is_held())
        .map(|lease| lease.fence)
}
