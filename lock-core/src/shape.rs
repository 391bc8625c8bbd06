//! What a request takes: one exclusive lock, a semaphore's permit, a side
//! of a read-write lock, or several locks at once (`lock_all`). The
//! [`Shape`] of a [`LockRequest`](crate::LockRequest) becomes the kind of
//! its Redis names (`backend::keys::Kind`, whose module documents the
//! data layout and the fairness rules). A leaf beside the request: it
//! imports nothing above it.

use std::sync::Arc;

use crate::backend::LockKeys;
use crate::backend::keys::{AllKeys, Kind};
use crate::error::LockError;
use crate::limits::validate_key;
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
