//! The Lua scripts: one file per operation, each run atomically by Redis
//! through `EVALSHA` (with an automatic `SCRIPT LOAD` on `NOSCRIPT`).
//!
//! Every check-then-act on a lock is one of these scripts: there is no
//! `GET`-then-`DEL` anywhere. Every script is safe to send twice (a retry after
//! a lost reply): acquire recognises its own token, release and renew only act
//! on the caller's own token.

use std::sync::LazyLock;

use redis::aio::ConnectionLike;
use redis::{Cmd, FromRedisValue, RedisResult, Script, ServerErrorKind};

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

/// Start an `EVALSHA` of `script` with `keys` keys: append the keys, then
/// the arguments, and send it with [`invoke`]. Built straight into one
/// command (no intermediate argument vectors): this is on every acquisition.
pub(crate) fn evalsha(script: &Script, keys: usize) -> Cmd {
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(script.get_hash()).arg(keys);
    cmd
}

/// Send a command made by [`evalsha`]; on `NOSCRIPT` (a restarted or
/// flushed server) load the script and send it once more.
pub(crate) async fn invoke<T: FromRedisValue, C: ConnectionLike>(
    script: &Script,
    cmd: &Cmd,
    con: &mut C,
) -> RedisResult<T> {
    match cmd.query_async(con).await {
        Err(e) if e.kind() == redis::ErrorKind::Server(ServerErrorKind::NoScript) => {
            script.load_async(con).await?;
            cmd.query_async(con).await
        }
        other => other,
    }
}

/// `leave.lua`: a waiter gives up its place in line.
pub(crate) static LEAVE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("leave.lua")));
