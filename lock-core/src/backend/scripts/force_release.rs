//! `force_release.lua`: an operator's release of whoever holds a lock.

use std::time::Duration;

use redis::Value;
use redis::aio::ConnectionLike;

use super::call::{Lua, ScriptError, evalsha, invoke};
use crate::backend::LockKeys;
use crate::backend::connect::millis;

/// The script's source as Redis runs it (with the shared helper first).
pub(super) const SOURCE: &str = concat!(
    include_str!("marker.lua"),
    include_str!("force_release.lua")
);

pub(super) static SCRIPT: Lua = Lua::new(|| redis::Script::new(SOURCE));

/// The shortest life of the forced marker: long enough for a holder whose
/// lease was about to run out to hear why at its next renewal.
pub(super) const MIN_MARKER: Duration = Duration::from_secs(1);

/// What `force_release.lua` did.
#[derive(Debug)]
pub(crate) struct Forced {
    /// The owner token that held the lock (`None`: it was free).
    pub(crate) holder: Option<String>,
    /// The first waiter in line, told it is next.
    pub(crate) next: Option<String>,
}

/// Delete the lock whoever holds it, announce it on the lock's channel with
/// `publish` (`PUBLISH`, or `SPUBLISH` on Cluster), and leave the forced
/// marker for the old holder's next renewal.
pub(crate) async fn force_release<C: ConnectionLike>(
    con: &mut C,
    keys: &LockKeys,
    publish: &str,
) -> Result<Forced, ScriptError> {
    let mut cmd = evalsha(&SCRIPT, 3);
    cmd.arg(keys.lock())
        .arg(keys.line())
        .arg(forced_name(keys))
        .arg(keys.channel())
        .arg(publish)
        .arg(millis(MIN_MARKER));
    let (code, holder, next): (i64, Option<String>, Option<String>) =
        invoke(&SCRIPT, &cmd, con).await?;
    match code {
        1 => Ok(Forced { holder, next }),
        0 => Ok(Forced {
            holder: None,
            next: None,
        }),
        _ => Err(ScriptError::WrongType {
            redis_key: keys.lock().to_owned(),
        }),
    }
}

/// Whether an operator released `token`'s lease (its forced marker names
/// it: a string for a lock, a set of tokens for a semaphore or rw lock).
/// One read, for a release whose reply was lost (see
/// `RedisBackend::resent_outcome`).
pub(crate) async fn was_forced<C: ConnectionLike>(
    con: &mut C,
    keys: &LockKeys,
    token: &str,
) -> Result<bool, ScriptError> {
    let forced = forced_name(keys);
    let cmd = if keys.kind.is_shared() {
        let mut cmd = redis::cmd("SISMEMBER");
        cmd.arg(&forced).arg(token);
        cmd
    } else {
        let mut cmd = redis::cmd("GET");
        cmd.arg(&forced);
        cmd
    };
    Ok(match cmd.query_async::<Value>(con).await? {
        Value::Int(found) => found == 1,
        Value::BulkString(holder) => holder == token.as_bytes(),
        _ => false,
    })
}

/// `P{K}:forced`: the lock key with `:forced` in place of `:lock` (renew.lua
/// derives it the same way).
pub(super) fn forced_name(keys: &LockKeys) -> String {
    let stem = keys.lock().strip_suffix(":lock").unwrap_or(keys.lock());
    format!("{stem}:forced")
}
