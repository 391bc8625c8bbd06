//! Reentrancy: inside the body of [`LockRequest::run`](crate::LockRequest::run)
//! (and so of a `#[distributed_lock]` function), acquiring a lock that the
//! body already holds through the same client succeeds at once, with no
//! round trip, and only the outermost holder gives it back.
//!
//! The record lives in a tokio task-local set by `run` around its body: it
//! belongs to that body alone. A task spawned from it is another owner (it
//! does not inherit the task-local), and a guard from
//! [`acquire`](crate::LockRequest::acquire) is never re-entered, because it
//! can be handed to another task: once it is, its lock is no longer the
//! acquiring task's, and that task's next acquisition of the key waits like
//! anyone else's. (Keying re-entry by task id would let a dispatcher that
//! handed its guard to a worker take the same lock again at once.)

use std::cell::RefCell;
use std::future::Future;
use std::sync::{Arc, Weak};

use crate::backend::LockKeys;
use crate::backend::keys::Kind;
use crate::lease::Lease;

tokio::task_local! {
    /// The leases held by the enclosing `run` bodies of this task, innermost last.
    static HELD: RefCell<Vec<Weak<Lease>>>;
}

/// The lease the current `run` scope holds on `key` through client
/// `client_id`, if still held (a lost lease is not re-entered).
pub(crate) fn find(client_id: u64, keys: &LockKeys) -> Option<Arc<Lease>> {
    HELD.try_with(|held| {
        held.borrow()
            .iter()
            .rev()
            .filter_map(Weak::upgrade)
            .find(|lease| lease.client_id() == client_id && lease.is_held() && holds(lease, keys))
    })
    .ok()
    .flatten()
}

/// Run `body` with `lease` recorded as held by it: nested acquisitions of
/// the same lock in `body` re-enter. The record is removed when `body`
/// ends or is dropped.
pub(crate) async fn holding<F: Future>(lease: &Arc<Lease>, body: F) -> F::Output {
    let entry = Arc::downgrade(lease);
    let nested = HELD
        .try_with(|held| held.borrow_mut().push(entry.clone()))
        .is_ok();
    if nested {
        let _record = Record(entry);
        body.await
    } else {
        HELD.scope(RefCell::new(vec![entry]), body).await
    }
}

/// Removes one entry from the enclosing scope when dropped.
struct Record(Weak<Lease>);

impl Drop for Record {
    fn drop(&mut self) {
        let _ = HELD.try_with(|held| {
            let mut held = held.borrow_mut();
            if let Some(at) = held.iter().rposition(|e| Weak::ptr_eq(e, &self.0)) {
                held.remove(at);
            }
        });
    }
}

/// The fencing token of the innermost lock held by the current task's
/// enclosing [`run`](crate::LockRequest::run) body (or `#[distributed_lock]`
/// function): pass it to a storage layer that rejects stale writers.
/// `None` outside such a body, or when its lease is lost. (A guard from
/// `acquire` carries its own: [`LockGuard::fencing_token`](crate::LockGuard::fencing_token).)
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), leasehold::LockError> {
/// let client = leasehold::LockClient::in_memory();
/// assert_eq!(leasehold::fencing_token(), None);
/// let token = client
///     .lock("doc:fencing_token")
///     .run(async { leasehold::fencing_token() })
///     .await?;
/// assert!(token.is_some());
/// # Ok(()) }
/// ```
pub fn fencing_token() -> Option<u64> {
    HELD.try_with(|held| {
        held.borrow()
            .iter()
            .rev()
            .filter_map(Weak::upgrade)
            .find(|lease| lease.is_held())
            .map(|lease| lease.fence)
    })
    .ok()
    .flatten()
}

/// The fencing token the current task holds for `key` (as given to `lock`,
/// without prefix) in an enclosing [`run`](crate::LockRequest::run) body
/// (or `#[distributed_lock]` function): the lock's own, or that key's token
/// of an enclosing `lock_all` (`keys = [...]`), so that each row is fenced
/// with its own key's token. `None` when no enclosing body holds `key`, or
/// its lease is lost. The innermost holder wins.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), leasehold::LockError> {
/// let client = leasehold::LockClient::in_memory();
/// let (a, b, c) = client
///     .lock_all(["acct:a", "acct:b"])
///     .run(async {
///         (
///             leasehold::fencing_token_of("acct:a"),
///             leasehold::fencing_token_of("acct:b"),
///             leasehold::fencing_token_of("acct:c"),
///         )
///     })
///     .await?;
/// assert!(a.is_some() && b.is_some());
/// assert_eq!(c, None);
/// # Ok(()) }
/// ```
pub fn fencing_token_of(key: &str) -> Option<u64> {
    HELD.try_with(|held| {
        held.borrow()
            .iter()
            .rev()
            .filter_map(Weak::upgrade)
            .filter(|lease| lease.is_held())
            .find_map(|lease| match &lease.keys.kind {
                crate::backend::keys::Kind::All(all) => all.fence_of(key),
                _ => (lease.keys.key() == key).then_some(lease.fence),
            })
    })
    .ok()
    .flatten()
}

/// Whether `lease` holds what `keys` names: the same primitive of the same
/// key, or a plain lock that is one of the keys of a `lock_all` lease.
fn holds(lease: &Lease, keys: &LockKeys) -> bool {
    if lease.keys.key() == keys.key() && lease.keys.kind == keys.kind {
        return true;
    }
    match (&lease.keys.kind, &keys.kind) {
        (Kind::All(all), Kind::Lock) => all.keys.iter().any(|k| k.key() == keys.key()),
        _ => false,
    }
}
