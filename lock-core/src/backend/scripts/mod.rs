//! The Lua scripts: one `.lua` file per operation, each run atomically by
//! Redis through `EVALSHA` (with an automatic `SCRIPT LOAD` on `NOSCRIPT`),
//! and beside each one typed Rust function that builds its call (KEYS and
//! ARGV in the order the `.lua` header documents) and decodes its reply.
//! Backends call only these functions.
//!
//! Every check-then-act on a lock is one of these scripts: there is no
//! `GET`-then-`DEL` anywhere. Every script is safe to send twice (a retry
//! after a lost reply): acquire recognises its own token, the others only act
//! on the caller's own token.

mod abandon;
mod acquire;
mod force_release;
mod inspect;
mod raise_fence;
mod release;
mod renew;

use std::sync::LazyLock;

use redis::aio::ConnectionLike;
use redis::{Cmd, FromRedisValue, RedisError, RedisResult, Script, ServerErrorKind};

pub(crate) use abandon::abandon;
pub(crate) use acquire::acquire;
pub(crate) use force_release::force_release;
pub(crate) use inspect::inspect;
pub(crate) use raise_fence::raise_fence;
pub(crate) use release::{Released, release};
pub(crate) use renew::renew;

use super::LockKeys;
use super::connect::backend_error;
use crate::error::LockError;

/// Every script, for preloading on all nodes of a cluster.
#[cfg(feature = "cluster")]
pub(crate) fn all() -> [&'static Script; 7] {
    [
        &acquire::SCRIPT,
        &release::SCRIPT,
        &renew::SCRIPT,
        &abandon::SCRIPT,
        &raise_fence::SCRIPT,
        &inspect::SCRIPT,
        &force_release::SCRIPT,
    ]
}

/// A script file, loaded once per process.
pub(crate) type Lua = LazyLock<Script>;

/// How a script call failed.
#[derive(Debug)]
pub(crate) enum ScriptError {
    /// The command failed (connection, timeout, server error).
    Redis(RedisError),
    /// One of the lock's Redis keys holds a value of another type; nothing
    /// was changed.
    WrongType {
        /// The Redis key with the unexpected type.
        redis_key: String,
    },
}

impl From<RedisError> for ScriptError {
    fn from(err: RedisError) -> Self {
        ScriptError::Redis(err)
    }
}

impl ScriptError {
    /// The precise [`LockError`], naming `server` (redacted) and the lock.
    pub(crate) fn into_lock_error(self, server: &str, keys: &LockKeys) -> LockError {
        match self {
            ScriptError::Redis(err) => backend_error(server, err).with_key(&keys.key),
            ScriptError::WrongType { redis_key } => LockError::WrongType {
                key: keys.key.clone(),
                redis_key,
            },
        }
    }

    /// The redis-rs error, if the command itself failed.
    pub(crate) fn redis(&self) -> Option<&RedisError> {
        match self {
            ScriptError::Redis(err) => Some(err),
            ScriptError::WrongType { .. } => None,
        }
    }
}

/// Start an `EVALSHA` of `script` with `keys` keys: append the keys, then
/// the arguments, and send it with [`invoke`]. Built straight into one
/// command (no intermediate argument vectors): this is on every acquisition.
fn evalsha(script: &Script, keys: usize) -> Cmd {
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(script.get_hash()).arg(keys);
    cmd
}

/// Send a command made by [`evalsha`]; on `NOSCRIPT` (a restarted or
/// flushed server) load the script and send it once more.
async fn invoke<T: FromRedisValue, C: ConnectionLike>(
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
