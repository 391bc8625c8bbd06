//! `abandon.lua`: give up an acquisition: the lock if this attempt got it,
//! and the place in line.

use redis::aio::ConnectionLike;

use super::call::{Lua, ScriptError, evalsha, invoke};
use crate::backend::LockKeys;

/// The script's source as Redis runs it (with the shared helpers first).
pub const SOURCE: &str = concat!(
    include_str!("typed.lua"),
    include_str!("marker.lua"),
    include_str!("abandon.lua")
);

pub(super) static SCRIPT: Lua = Lua::new(|| redis::Script::new(SOURCE));

/// Remove every trace of the acquisition `token`: its lock (if an attempt
/// whose reply never came got it) and its place in line, telling the next
/// waiter when the lock is free. Returns whether it held the lock.
pub(crate) async fn abandon<C: ConnectionLike>(
    con: &mut C,
    keys: &LockKeys,
    token: &str,
    publish: &str,
) -> Result<bool, ScriptError> {
    let mut cmd = evalsha(&SCRIPT, 3);
    cmd.arg(keys.lock())
        .arg(keys.line())
        .arg(keys.places())
        .arg(token)
        .arg(keys.channel())
        .arg(publish);
    let held: i64 = invoke(&SCRIPT, &cmd, con).await?;
    Ok(held == 1)
}
