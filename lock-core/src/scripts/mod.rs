//! The Lua scripts: one file per operation, each run atomically by Redis
//! through `EVALSHA` (with an automatic `SCRIPT LOAD` on `NOSCRIPT`).
//!
//! Every check-then-act on a lock is one of these scripts: there is no
//! `GET`-then-`DEL` anywhere. Every script is safe to send twice (a retry after
//! a lost reply): acquire recognises its own token, release and renew only act
//! on the caller's own token.

use std::sync::LazyLock;

use redis::Script;

/// `acquire.lua`: take a free lock, or report the holder's remaining lease.
pub(crate) static ACQUIRE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("acquire.lua")));

/// `release.lua`: owner-checked delete (or keep for `at_least`) + release notification.
pub(crate) static RELEASE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("release.lua")));

/// `renew.lua`: owner-checked expiry reset for one or many leases.
pub(crate) static RENEW: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("renew.lua")));

/// `raise_fence.lua`: level a fencing counter up to an issued token (Redlock).
pub(crate) static RAISE_FENCE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("raise_fence.lua")));
