//! The one error type of leasehold.

use std::time::Duration;

/// Everything that can go wrong when taking, keeping or giving back a lock.
///
/// Every variant that concerns one lock carries its `key` (as given to
/// [`LockClient::lock`](crate::LockClient::lock), without the prefix), and
/// messages never contain a password: server addresses are shown redacted.
///
/// ```
/// use leasehold::LockError;
///
/// let err = LockError::Busy { key: "order:42".into() };
/// assert_eq!(err.to_string(), "lock `order:42` is held by another owner");
/// assert!(err.is_busy());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LockError {
    /// The lock is held by someone else, and it still was when the `wait`
    /// budget ran out (or there was none).
    #[error("lock `{key}` is held by another owner")]
    Busy {
        /// The lock's key.
        key: String,
    },

    /// The lease was lost while the caller relied on it; `cause` says why.
    #[error("lease on lock `{key}` was lost before the work finished: {cause}")]
    Lost {
        /// The lock's key.
        key: String,
        /// Why the lease was lost.
        cause: LostCause,
    },

    /// The caller asked to extend or release a lease that is no longer its
    /// own: it expired, was released already, or someone else holds it now.
    #[error("lock `{key}` is not held by this owner (expired, released, or taken by another)")]
    NotHeld {
        /// The lock's key.
        key: String,
    },

    /// An argument can never work: an empty key, a zero TTL, a malformed URL...
    #[error("invalid argument `{name}`: {reason}")]
    InvalidArgument {
        /// The name of the argument (`key`, `ttl`, `url`, ...).
        name: &'static str,
        /// What is wrong with it.
        reason: String,
    },

    /// `#[distributed_lock]` without `client = ...` ran before
    /// [`set_global_client`](crate::set_global_client) was called.
    #[error(
        "no global LockClient: call leasehold::set_global_client(..) at startup, or pass `client = ..`"
    )]
    NoGlobalClient,

    /// A Redis key used by the lock holds a value of another type, written by
    /// something other than leasehold. Nothing was overwritten.
    #[error(
        "lock `{key}`: Redis key `{redis_key}` holds a value of the wrong type (not written by leasehold); nothing was changed"
    )]
    WrongType {
        /// The lock's key.
        key: String,
        /// The Redis key that has the unexpected type.
        redis_key: String,
    },

    /// The backend failed: Redis unreachable, a timeout, a protocol or script
    /// error. `server` names the server without any password.
    #[error("redis backend error on {server}{}: {message}", key_suffix(.key))]
    Backend {
        /// The server, as `redis://user:***@host:port/db` (credentials redacted).
        server: String,
        /// The lock's key, when the failure concerned one lock.
        key: Option<String>,
        /// What failed.
        message: String,
    },

    /// The server refused this client's setup, and no retry will fix it: a
    /// wrong password or user name (`WRONGPASS`), no password for a server
    /// that requires one (`NOAUTH`), a database the server does not have
    /// (`/99`), a user the ACL does not allow a command leasehold needs
    /// (`NOPERM`), a TLS certificate not trusted, a client certificate
    /// missing, a port where something other than Redis answers, or a
    /// `rediss://` URL for a server that answers plain text. `server` names
    /// the server without any password, and
    /// `message` says what to change.
    #[error("redis setup error on {server}{}: {message}", key_suffix(.key))]
    Misconfigured {
        /// The server, as `redis://user:***@host:port/db` (credentials redacted).
        server: String,
        /// The lock's key, when the failure concerned one lock.
        key: Option<String>,
        /// What is wrong, and how to fix it.
        message: String,
    },

    /// The lock was acquired, but fewer replicas than required acknowledged
    /// it in time; it was released again (fail closed).
    #[error(
        "lock `{key}`: only {acked} of {needed} required replicas acknowledged the acquisition; released it"
    )]
    ReplicaSync {
        /// The lock's key.
        key: String,
        /// Replicas that acknowledged.
        acked: usize,
        /// Replicas required.
        needed: usize,
    },

    /// The lock cannot be granted now, although nothing is wrong with it or
    /// with the setup: the server restarted or failed over and may have
    /// lost a lease of this key that another client still relies on (a
    /// lost lease is detected, never trusted), or it is younger than
    /// [`restart_grace`](crate::LockClientBuilder::restart_grace). Not
    /// [`Busy`](LockError::Busy): an HTTP service answers 503, with
    /// `Retry-After` from [`retry_after`](LockError::retry_after).
    #[error("{server} grants no lock{} for now: {reason}{}", key_suffix(.key), reopens_note(.retry_after))]
    Unavailable {
        /// The lock's key, when the refusal concerned one lock.
        key: Option<String>,
        /// The server (credentials redacted).
        server: String,
        /// Why it grants nothing now.
        reason: String,
        /// When grants reopen, counted from when the error was made (`None`:
        /// not known).
        retry_after: Option<Duration>,
    },

    /// Redlock could not get a majority of the masters to agree in time.
    #[error(
        "redlock quorum not reached{}: {reached} of {nodes} nodes agreed, {needed} needed{}",
        key_suffix(.key),
        validity_note(.validity_left)
    )]
    Quorum {
        /// The lock's key (`None` when connecting).
        key: Option<String>,
        /// How many nodes granted the operation.
        reached: usize,
        /// How many were needed (N/2 + 1).
        needed: usize,
        /// How many nodes there are.
        nodes: usize,
        /// When a majority answered but too late: the validity left (zero).
        validity_left: Option<Duration>,
    },
}

/// Why a lease was lost: carried by [`LockError::Lost`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LostCause {
    /// The server refused a renewal or extension: the key had expired, was
    /// deleted, or belongs to another owner now.
    Refused,
    /// The validity deadline passed without renewal (no `renew`).
    Expired,
    /// The validity deadline passed while the server(s) did not answer
    /// (unreachable, stalled, partitioned): the lease may have run out there.
    Unreachable,
    /// The server restarted (its `run_id` changed) and no longer has the key.
    Restarted,
    /// The server failed over to a new primary that does not have the key.
    FailedOver,
    /// An operator released the lock (`LockClient::force_release`).
    ForceReleased,
    /// Renewal stopped at the request's `max_hold`, and the lease ran out.
    MaxHold,
}

impl std::fmt::Display for LostCause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            LostCause::Refused => {
                "the server refused the renewal (expired, deleted or taken by another owner)"
            }
            LostCause::Expired => "its validity passed without renewal",
            LostCause::Unreachable => "the server did not answer before the validity passed",
            LostCause::Restarted => "the server restarted and lost the lock",
            LostCause::FailedOver => "the server failed over to a primary without the lock",
            LostCause::ForceReleased => "an operator released it",
            LostCause::MaxHold => "max_hold was reached and renewal stopped",
        })
    }
}

fn key_suffix(key: &Option<String>) -> String {
    match key {
        Some(k) => format!(" (lock `{k}`)"),
        None => String::new(),
    }
}

fn reopens_note(after: &Option<Duration>) -> String {
    match after {
        Some(after) => format!("; grants reopen in {:.1} s", after.as_secs_f64()),
        None => String::new(),
    }
}

fn validity_note(left: &Option<Duration>) -> &'static str {
    match left {
        Some(_) => " (a majority agreed, but the acquisition took longer than the lease)",
        None => "",
    }
}

impl LockError {
    /// `true` for [`LockError::Busy`]: someone else holds the lock.
    pub fn is_busy(&self) -> bool {
        matches!(self, LockError::Busy { .. })
    }

    /// `true` for [`LockError::Lost`] and [`LockError::NotHeld`]: the lease is gone.
    pub fn is_lost(&self) -> bool {
        matches!(self, LockError::Lost { .. } | LockError::NotHeld { .. })
    }

    /// `true` when the backend could not be reached, did not answer, or could
    /// not replicate in time, or grants nothing for now after a restart
    /// ([`LockError::Backend`], [`LockError::Unavailable`],
    /// [`LockError::Quorum`], [`LockError::ReplicaSync`]): retrying later
    /// may help. Never true for a setup mistake (see
    /// [`is_misconfigured`](Self::is_misconfigured)).
    pub fn is_unavailable(&self) -> bool {
        matches!(
            self,
            LockError::Backend { .. }
                | LockError::Unavailable { .. }
                | LockError::Quorum { .. }
                | LockError::ReplicaSync { .. }
                | LockError::Lost {
                    cause: LostCause::Unreachable,
                    ..
                }
        )
    }

    /// `true` for an acquisition's failure that can clear by itself
    /// (unreachable, a timeout, no quorum, closed for now): the only kind a
    /// request's `wait` budget tries again. Never for a wrong kind of key, a
    /// refused argument or a setup mistake.
    pub(crate) fn is_transient(&self) -> bool {
        matches!(
            self,
            LockError::Backend { .. } | LockError::Unavailable { .. } | LockError::Quorum { .. }
        )
    }

    /// How long to wait before trying again, when the error knows it: the
    /// rest of a restart's grace ([`LockError::Unavailable`]).
    ///
    /// ```
    /// use std::time::Duration;
    /// use leasehold::LockError;
    ///
    /// let err = LockError::Unavailable {
    ///     key: Some("order:42".into()),
    ///     server: "redis://cache:6379".into(),
    ///     reason: "the server restarted".into(),
    ///     retry_after: Some(Duration::from_secs(3)),
    /// };
    /// assert!(err.is_unavailable() && !err.is_busy());
    /// assert_eq!(err.retry_after(), Some(Duration::from_secs(3)));
    /// ```
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            LockError::Unavailable { retry_after, .. } => *retry_after,
            _ => None,
        }
    }

    /// `true` when the setup is wrong and retrying cannot help: a wrong
    /// password or user, `NOAUTH`, an unknown database, a missing ACL
    /// permission, an untrusted server certificate or a missing client
    /// certificate, a server refused for its `maxmemory-policy`
    /// ([`LockError::Misconfigured`]). An HTTP service answers 500 and someone fixes the setup.
    ///
    /// ```
    /// use leasehold::LockError;
    ///
    /// let err = LockError::Misconfigured {
    ///     server: "redis://:***@10.0.0.5:6379".into(),
    ///     key: None,
    ///     message: "WRONGPASS: the server refused the password in the URL".into(),
    /// };
    /// assert!(err.is_misconfigured());
    /// assert!(!err.is_unavailable());
    /// ```
    pub fn is_misconfigured(&self) -> bool {
        matches!(self, LockError::Misconfigured { .. })
    }

    /// The lock's key, when the error concerns one lock.
    pub fn key(&self) -> Option<&str> {
        match self {
            LockError::Busy { key }
            | LockError::Lost { key, .. }
            | LockError::NotHeld { key }
            | LockError::WrongType { key, .. }
            | LockError::ReplicaSync { key, .. } => Some(key),
            LockError::Backend { key, .. }
            | LockError::Unavailable { key, .. }
            | LockError::Misconfigured { key, .. }
            | LockError::Quorum { key, .. } => key.as_deref(),
            LockError::InvalidArgument { .. } | LockError::NoGlobalClient => None,
        }
    }

    /// A backend failure on `server` (already redacted), not yet tied to a lock.
    pub(crate) fn backend(server: &str, message: impl Into<String>) -> Self {
        LockError::Backend {
            server: server.to_owned(),
            key: None,
            message: message.into(),
        }
    }

    /// A setup mistake on `server` (already redacted), not yet tied to a lock.
    pub(crate) fn misconfigured(server: &str, message: impl Into<String>) -> Self {
        LockError::Misconfigured {
            server: server.to_owned(),
            key: None,
            message: message.into(),
        }
    }

    pub(crate) fn invalid(name: &'static str, reason: impl Into<String>) -> Self {
        LockError::InvalidArgument {
            name,
            reason: reason.into(),
        }
    }

    /// Attach the lock key to a backend error that did not know it.
    pub(crate) fn with_key(mut self, lock_key: &str) -> Self {
        if let LockError::Backend { key, .. }
        | LockError::Unavailable { key, .. }
        | LockError::Misconfigured { key, .. }
        | LockError::Quorum { key, .. } = &mut self
            && key.is_none()
        {
            *key = Some(lock_key.to_owned());
        }
        self
    }

    /// The same error with its key `from` (a Redis-side key, such as an
    /// election's) shown as `to` (the name the caller gave).
    pub(crate) fn renamed(mut self, from: &str, to: &str) -> Self {
        let key = match &mut self {
            LockError::Busy { key }
            | LockError::Lost { key, .. }
            | LockError::NotHeld { key }
            | LockError::WrongType { key, .. }
            | LockError::ReplicaSync { key, .. } => Some(key),
            LockError::Backend { key, .. }
            | LockError::Unavailable { key, .. }
            | LockError::Misconfigured { key, .. }
            | LockError::Quorum { key, .. } => key.as_mut(),
            LockError::InvalidArgument { .. } | LockError::NoGlobalClient => None,
        };
        if let Some(key) = key.filter(|key| key.as_str() == from) {
            *key = to.to_owned();
        }
        self
    }
}

/// Redact every password of a Redis URL, whatever its form:
/// `redis://u:secret@h:1/0` becomes `redis://u:***@h:1/0`, and a password
/// given as a query parameter (`unix:///s.sock?pass=secret`, `password=`)
/// becomes `***`. Passwords may contain unescaped `#`, `/`, `?` or `@`: the
/// credentials are everything up to the *last* `@`, since a host cannot
/// contain one.
///
/// Text that is not a URL at all is redacted the same way: without a
/// well-formed `scheme://` (`default:secret@h:1`, `redis:/:secret@h`,
/// `redis:secret@h`, a leading space...), everything before the last `@`
/// counts as credentials, and only what precedes its first `:` (a user
/// name, or the misspelt scheme) stays.
pub(crate) fn redact_url(url: &str) -> String {
    let scheme_len = scheme_length(url);
    let (scheme, rest) = url.split_at(scheme_len);
    let mut out = String::with_capacity(url.len());
    out.push_str(scheme);
    let after_credentials = match rest.rfind('@') {
        Some(at) => {
            let userinfo = &rest[..at];
            match userinfo.find(':') {
                Some(colon) => {
                    out.push_str(&userinfo[..colon]);
                    out.push_str(":***@");
                }
                // `redis://secret@host` puts the password in the user position.
                None => out.push_str("***@"),
            }
            &rest[at + 1..]
        }
        None => rest,
    };
    out.push_str(&redact_query(after_credentials));
    out
}

/// The length of a well-formed `scheme://` at the start of `url` (RFC 3986:
/// a letter, then letters, digits, `+`, `-` or `.`), or 0 when there is none.
fn scheme_length(url: &str) -> usize {
    let Some(colon) = url.find("://") else {
        return 0;
    };
    let name = &url[..colon];
    let well_formed = name.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
    if well_formed { colon + 3 } else { 0 }
}

/// `pass=` and `password=` query parameters, redacted.
fn redact_query(text: &str) -> String {
    let Some(start) = text.find('?') else {
        return text.to_owned();
    };
    let (path, query) = text.split_at(start + 1);
    let params: Vec<String> = query
        .split('&')
        .map(|param| match param.split_once('=') {
            Some((name, _)) if is_secret_param(name) => format!("{name}=***"),
            _ => param.to_owned(),
        })
        .collect();
    format!("{path}{}", params.join("&"))
}

fn is_secret_param(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    name.ends_with("password") || name.ends_with("pass") || name == "pw" || name == "pwd"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redacts_passwords() {
        assert_eq!(
            redact_url("redis://user:pw@host:6379/0"),
            "redis://user:***@host:6379/0"
        );
        assert_eq!(redact_url("redis://:pw@host"), "redis://:***@host");
        assert_eq!(redact_url("rediss://pw@host/1"), "rediss://***@host/1");
        assert_eq!(redact_url("redis://host:1/2"), "redis://host:1/2");
        assert_eq!(redact_url("redis://u:p@ss:w@host/"), "redis://u:***@host/");
        assert_eq!(redact_url("unix:///tmp/r.sock"), "unix:///tmp/r.sock");
        assert_eq!(
            redact_url("unix:///tmp/r.sock?db=1&pass=secret"),
            "unix:///tmp/r.sock?db=1&pass=***"
        );
        assert_eq!(
            redact_url("redis://:Hunter2#Pw@127.0.0.1:1"),
            "redis://:***@127.0.0.1:1"
        );
        assert_eq!(
            redact_url("redis://u:a/b?c@d@h:1/0?password=x"),
            "redis://u:***@h:1/0?password=***"
        );
    }

    #[test]
    fn redacts_passwords_of_urls_without_a_valid_scheme() {
        for (url, shown) in [
            ("default:pw@host:6379", "default:***@host:6379"),
            (":pw@host", ":***@host"),
            ("pw@host", "***@host"),
            ("redis:/:pw@host", "redis:***@host"),
            ("redis:pw@host:1/0", "redis:***@host:1/0"),
            ("redis:/u:pw@host", "redis:***@host"),
            ("u:a:pw@host", "u:***@host"),
            ("u:x://pw@host", "u:***@host"),
            (" redis://:pw@host", " redis:***@host"),
            ("redis ://:pw@host", "redis :***@host"),
            ("redis\\\\:pw@host", "redis\\\\:***@host"),
            ("host:1?password=pw", "host:1?password=***"),
            ("redsi://u:pw@host", "redsi://u:***@host"),
        ] {
            assert_eq!(redact_url(url), shown, "{url}");
            assert!(!redact_url(url).contains("pw@"), "{url}");
        }
    }

    #[test]
    fn messages_name_the_key() {
        let e = LockError::Backend {
            server: "redis://h:1".into(),
            key: None,
            message: "timed out".into(),
        }
        .with_key("k");
        assert_eq!(
            e.to_string(),
            "redis backend error on redis://h:1 (lock `k`): timed out"
        );
        assert_eq!(e.key(), Some("k"));
    }
}
