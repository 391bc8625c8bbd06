//! `family_abandon.lua`: give up an acquisition of a permit or rw-lock side.

use redis::aio::ConnectionLike;

use super::call::{Lua, ScriptError, evalsha, invoke, unexpected};
use crate::backend::LockKeys;

/// The script's source as Redis runs it (with the shared helpers first).
pub const SOURCE: &str = concat!(
    include_str!("typed.lua"),
    include_str!("family.lua"),
    include_str!("family_abandon.lua")
);

pub(super) static SCRIPT: Lua = Lua::new(|| redis::Script::new(SOURCE));

/// Remove every trace of the acquisition `token`: what an attempt whose
/// reply never came got, and its place in line, telling the next in line if
/// it may go now. Returns whether it held a permit or side.
pub(crate) async fn family_abandon<C: ConnectionLike>(
    con: &mut C,
    keys: &LockKeys,
    token: &str,
    publish: &str,
) -> Result<bool, ScriptError> {
    let letter = keys
        .kind
        .letter()
        .ok_or_else(|| unexpected("family_abandon"))?;
    let mut cmd = evalsha(&SCRIPT, 3);
    cmd.arg(keys.lock())
        .arg(keys.line())
        .arg(keys.places())
        .arg(token)
        .arg(letter)
        .arg(keys.kind.permits())
        .arg(keys.channel())
        .arg(publish);
    let held: i64 = invoke(&SCRIPT, &cmd, con).await?;
    Ok(held == 1)
}
