//! How every adapter is configured, and what its calls return.

use std::time::Duration;

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
pub type Res<T> = Result<T, BoxError>;

/// One of the Redis keys of lock `name` in leasehold's layout (default
/// prefix): `part` is `lock`, `fence`, `line`, `places` or `released`.
pub fn leasehold_key(name: &str, part: &str) -> String {
    format!("{}{{{name}}}:{part}", ::leasehold::DEFAULT_PREFIX)
}

/// How to configure a lock.
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    /// The lease length.
    pub ttl: Duration,
    /// Keep the lease alive in the background (the library's own mechanism).
    pub renew: bool,
    /// leasehold: use the Redlock client even for a single URL.
    pub redlock: bool,
    /// What one acquisition takes (S9; the plain lock elsewhere).
    pub shape: Shape,
}

/// What one acquisition of key `k` takes (the lock family, S9).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// The exclusive lock of `k`.
    Lock,
    /// One permit of a semaphore of this many permits on `k`.
    Permit(u32),
    /// A read share of the rw lock `k`.
    Read,
    /// The write side of the rw lock `k`.
    Write,
    /// All of this many keys `k:0`, `k:1`, ... at once.
    All(u32),
}

impl Settings {
    pub fn plain(ttl: Duration) -> Settings {
        Settings {
            ttl,
            renew: false,
            redlock: false,
            shape: Shape::Lock,
        }
    }
}
