//! How one script is called: its type, `EVALSHA` (loading it again on
//! `NOSCRIPT`), and the errors its reply can carry.

use std::sync::LazyLock;

use redis::aio::ConnectionLike;
use redis::{Cmd, FromRedisValue, RedisError, RedisResult, Script, ServerErrorKind, Value};

use crate::backend::LockKeys;

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
    /// The command hit a broken connection (the manager reconnects): every
    /// script is safe to send once more.
    pub(crate) fn connection_broke(&self) -> bool {
        self.redis()
            .is_some_and(|e| e.is_io_error() || e.is_connection_dropped())
    }

    /// The redis-rs error, if the command itself failed.
    pub(crate) fn redis(&self) -> Option<&RedisError> {
        match self {
            ScriptError::Redis(err) => Some(err),
            ScriptError::WrongType { .. } => None,
        }
    }
}

/// A script's `{-1, i}` reply: `KEYS[i]` (in the acquire and inspect
/// scripts' order: lock, fence, line, places) holds a value of another type.
pub(super) fn wrong_type(keys: &LockKeys, reply: &[Value]) -> ScriptError {
    let redis_key = match reply.get(1) {
        Some(Value::Int(2)) => keys.fence(),
        Some(Value::Int(3)) => keys.line(),
        Some(Value::Int(4)) => keys.places(),
        _ => keys.lock(),
    };
    ScriptError::WrongType {
        redis_key: redis_key.to_owned(),
    }
}

/// A reply the script cannot give (another script under the same SHA?).
pub(super) fn unexpected(script: &'static str) -> ScriptError {
    ScriptError::Redis(RedisError::from((
        redis::ErrorKind::UnexpectedReturnType,
        "leasehold's script answered an unexpected reply",
        script.to_owned(),
    )))
}

/// Start an `EVALSHA` of `script` with `keys` keys: append the keys, then
/// the arguments, and send it with [`invoke`]. Built straight into one
/// command (no intermediate argument vectors): this is on every acquisition.
pub(super) fn evalsha(script: &Script, keys: usize) -> Cmd {
    // Room for the usual call (a dozen arguments, a few hundred bytes)
    // from the start: growing the buffers argument by argument was a
    // visible share of the client's CPU time in the benchmark.
    let mut cmd = Cmd::with_capacity(16, 512);
    cmd.arg("EVALSHA");
    cmd.arg(script.get_hash()).arg(keys);
    cmd
}

/// Send a command made by [`evalsha`]; on `NOSCRIPT` (a restarted or
/// flushed server) load the script and send it once more.
pub(super) async fn invoke<T: FromRedisValue, C: ConnectionLike>(
    script: &Script,
    cmd: &Cmd,
    con: &mut C,
) -> RedisResult<T> {
    match cmd.query_async(con).await {
        Err(e) if e.kind() == redis::ErrorKind::Server(ServerErrorKind::NoScript) => {
            // Boxed: rare (once per script and server), and its two calls
            // would otherwise sit in every call's future.
            Box::pin(async move {
                script.load_async(con).await?;
                cmd.query_async(con).await
            })
            .await
        }
        other => other,
    }
}
