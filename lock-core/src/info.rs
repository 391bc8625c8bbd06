//! [`LockInfo`]: what operators see of a held lock (`LockClient::inspect`,
//! `LockClient::list`, the `leasehold` CLI). A leaf module.

use std::time::Duration;

/// One held lock, as the backend sees it now: who holds it, how much of the
/// lease is left, its fencing token and how many wait for it.
///
/// Returned by [`LockClient::inspect`](crate::LockClient::inspect) and
/// [`LockClient::list`](crate::LockClient::list). A snapshot: by the time
/// it is read the lease may have been renewed, released or lost.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), leasehold::LockError> {
/// use std::time::Duration;
/// use leasehold::LockClient;
///
/// let client = LockClient::builder()
///     .prefix("doc-lockinfo:")
///     .name("billing-worker-3")
///     .in_memory();
/// let guard = client.lock("order:42").ttl(Duration::from_secs(10)).acquire().await?;
///
/// let held = client.inspect("order:42").await?;
/// assert!(held.is_some(), "held by the guard above");
/// if let Some(info) = held {
///     assert_eq!(info.key, "order:42");
///     assert_eq!(info.holder, "billing-worker-3");
///     assert!(info.ttl <= Duration::from_secs(10));
///     assert_eq!(info.fencing_token, guard.fencing_token());
///     assert_eq!(info.waiters, 0);
/// }
/// # Ok(()) }
/// ```
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockInfo {
    /// The key as given to `lock`, without the client's prefix.
    pub key: String,
    /// The holding client's name ([`LockClientBuilder::name`](crate::LockClientBuilder::name);
    /// default `hostname:pid`).
    pub holder: String,
    /// The lease time left (zero for a key without expiry, which leasehold
    /// never writes).
    pub ttl: Duration,
    /// The holder's fencing token ([`LockGuard::fencing_token`](crate::LockGuard::fencing_token)).
    pub fencing_token: u64,
    /// Tasks in line for it, across clients (Redlock keeps no line: 0).
    pub waiters: usize,
    /// What is held: a lock, semaphore permits, read shares or a writer.
    /// For a semaphore or rw lock, `holder`, `ttl` and `fencing_token`
    /// above are those of the latest grant (the highest fencing token).
    pub kind: LockKind,
    /// Every holder (one for a lock or writer; each permit of a semaphore,
    /// each read share).
    pub holders: Vec<Holder>,
}

/// What a [`LockInfo`] shows is held.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockKind {
    /// An exclusive lock ([`LockClient::lock`](crate::LockClient::lock),
    /// or one key of [`LockClient::lock_all`](crate::LockClient::lock_all)).
    Lock,
    /// Permits of a counting semaphore ([`LockClient::semaphore`](crate::LockClient::semaphore)).
    Semaphore,
    /// Read shares of a read-write lock ([`RwLock::read`](crate::RwLock::read)).
    Read,
    /// The write side of a read-write lock ([`RwLock::write`](crate::RwLock::write)).
    Write,
    /// The leadership of an election ([`LockClient::election`](crate::LockClient::election)):
    /// `key` is the election's name, `holder` the leader, `fencing_token`
    /// its term and `waiters` the candidates in line.
    Election,
}

/// One holder of a lock, permit or share, in a [`LockInfo`].
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    /// The holding client's name.
    pub holder: String,
    /// The lease time left.
    pub ttl: Duration,
    /// The holder's fencing token.
    pub fencing_token: u64,
}

impl Holder {
    pub(crate) fn new(owner_token: &str, ttl: Duration, fencing_token: u64) -> Holder {
        Holder {
            holder: holder_name(owner_token).to_owned(),
            ttl,
            fencing_token,
        }
    }
}

impl LockInfo {
    /// Build from the owner token stored in the lock (`<32 hex>:<name>`).
    pub(crate) fn new(
        key: String,
        owner_token: &str,
        ttl: Duration,
        fencing_token: u64,
        waiters: usize,
    ) -> LockInfo {
        LockInfo {
            key,
            holder: holder_name(owner_token).to_owned(),
            ttl,
            fencing_token,
            waiters,
            kind: LockKind::Lock,
            holders: vec![Holder::new(owner_token, ttl, fencing_token)],
        }
    }

    /// The same, for a semaphore or rw lock of `kind` with these holders.
    pub(crate) fn with_holders(mut self, kind: LockKind, holders: Vec<Holder>) -> LockInfo {
        self.kind = kind;
        self.holders = holders;
        self
    }
}

/// The client name in an owner token: what follows the first `:` (a token
/// without one, written by something else, is shown whole).
fn holder_name(owner_token: &str) -> &str {
    match owner_token.split_once(':') {
        Some((_random, name)) => name,
        None => owner_token,
    }
}

#[cfg(test)]
mod tests {
    use super::holder_name;

    #[test]
    fn the_holder_is_the_name_after_the_random_part() {
        assert_eq!(
            holder_name("0123456789abcdef0123456789abcdef:billing-worker-3"),
            "billing-worker-3"
        );
        assert_eq!(holder_name("0123:host:4242"), "host:4242");
        assert_eq!(holder_name("opaque"), "opaque");
    }
}
