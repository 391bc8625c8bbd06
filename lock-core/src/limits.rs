//! The limits of what a lock request may ask for, and their checks (a tokio
//! runtime among them). A leaf:
//! it imports nothing from the rest of the crate but the error type.

use std::time::Duration;

use crate::error::LockError;

/// The default lease length.
pub const DEFAULT_TTL: Duration = Duration::from_secs(30);

/// The shortest lease accepted. A lease is valid for its TTL minus a margin
/// for clock drift (TTL/100 + 2 ms), and must outlast a round trip to Redis
/// to be of any use: below this, a lock would be lost before it could be
/// used.
pub const MIN_TTL: Duration = Duration::from_millis(10);

/// The longest lease accepted (365 days): beyond this a "lease" is a
/// permanent lock in disguise, and a crashed holder would block everyone for
/// too long. The same limit applies to `at_least` and `max_hold`, and to the
/// attribute's options.
pub const MAX_TTL: Duration = Duration::from_secs(365 * 24 * 3600);

/// The longest wait: longer ones (such as `Duration::MAX`, "as long as it
/// takes") are capped to it, so that deadlines stay representable.
pub const MAX_WAIT: Duration = Duration::from_secs(10 * 365 * 24 * 3600);

/// The longest key accepted, in bytes.
pub const MAX_KEY_LEN: usize = 4096;

/// How long a waiter's place in line outlives its client's last sign of
/// life, by default (`LockClientBuilder::place_life`).
pub(crate) const DEFAULT_PLACE_LIFE: Duration = Duration::from_secs(2);
/// The shortest place life: its client keeps it every third of it.
pub(crate) const MIN_PLACE_LIFE: Duration = Duration::from_millis(300);
/// The longest place life (a dead waiter holds its line up for that long).
pub(crate) const MAX_PLACE_LIFE: Duration = Duration::from_secs(3600);

/// A lease length (`ttl`, a default TTL, an `extend`).
pub(crate) fn validate_ttl(ttl: Duration) -> Result<(), LockError> {
    if ttl < MIN_TTL {
        return Err(LockError::invalid(
            "ttl",
            format!("a lease must last at least {MIN_TTL:?} (got {ttl:?})"),
        ));
    }
    validate_span("ttl", ttl)
}

/// A duration bounded by [`MAX_TTL`] (`ttl`, `at_least`, `max_hold`).
pub(crate) fn validate_span(name: &'static str, span: Duration) -> Result<(), LockError> {
    if span > MAX_TTL {
        return Err(LockError::invalid(
            name,
            format!("at most 365 days (got {span:?})"),
        ));
    }
    Ok(())
}

/// A lock key: not empty, at most [`MAX_KEY_LEN`] bytes, no `}`.
pub(crate) fn validate_key(key: &str) -> Result<(), LockError> {
    if key.is_empty() {
        return Err(LockError::invalid("key", "the lock key is empty"));
    }
    if key.len() > MAX_KEY_LEN {
        return Err(LockError::invalid(
            "key",
            format!(
                "the lock key is {} bytes long, the limit is {MAX_KEY_LEN}",
                key.len()
            ),
        ));
    }
    if key.contains('}') {
        return Err(LockError::invalid(
            "key",
            format!(
                "the lock key `{key}` contains `}}`: braces delimit the Redis Cluster hash tag \
                 that keeps a lock's keys together"
            ),
        ));
    }
    Ok(())
}

/// A key prefix: no braces (they delimit the hash tag).
pub(crate) fn validate_prefix(prefix: &str) -> Result<(), LockError> {
    if prefix.contains(['{', '}']) {
        return Err(LockError::invalid(
            "prefix",
            format!("`{prefix}` contains a brace; braces delimit the hash tag"),
        ));
    }
    Ok(())
}

/// Refuse to go on outside a tokio runtime, where the Redis client (and
/// leasehold's own timers and background tasks) would panic.
pub(crate) fn require_runtime(operation: &str) -> Result<(), LockError> {
    match tokio::runtime::Handle::try_current() {
        Ok(_) => Ok(()),
        Err(_) => Err(LockError::invalid(
            "runtime",
            format!(
                "{operation} ran outside a tokio runtime; leasehold needs one, with time and I/O \
                 enabled (#[tokio::main], or tokio::runtime::Builder::enable_all)"
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_are_checked() {
        assert!(validate_ttl(Duration::from_millis(2)).is_err());
        assert!(validate_ttl(MIN_TTL).is_ok());
        assert!(validate_ttl(MAX_TTL + Duration::from_secs(1)).is_err());
        assert!(validate_key("").is_err());
        assert!(validate_key("a}b").is_err());
        assert!(validate_key(&"k".repeat(MAX_KEY_LEN + 1)).is_err());
        assert!(validate_prefix("p{").is_err());
    }
}
