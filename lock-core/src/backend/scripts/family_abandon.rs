//! `family_abandon.lua`: give up an acquisition of a permit or rw-lock side.

use redis::Value;
use redis::aio::ConnectionLike;

use super::call::{Lua, ScriptError, evalsha, invoke, unexpected};
use super::family_release::messages;
use crate::backend::LockKeys;

/// The script's source as Redis runs it (with the shared helpers first).
pub const SOURCE: &str = concat!(
    include_str!("typed.lua"),
    include_str!("family.lua"),
    include_str!("family_abandon.lua"),
    include_str!("family_hand_on.lua")
);

pub(super) static SCRIPT: Lua = Lua::new(|| redis::Script::new(SOURCE));

/// Remove every trace of the acquisition `token`: what an attempt whose
/// reply never came got, and its place in line, handing the permit or side
/// on to those in line that may go now (as a release does). Returns whether
/// it held a permit or side, and the messages published to those told (a
/// grant, or `next:` for one only woken), in line order. (Every grant is
/// published: an abandon's reply, resent after a lost one, cannot tell
/// what the first try handed on.)
pub(crate) async fn family_abandon<C: ConnectionLike>(
    con: &mut C,
    keys: &LockKeys,
    token: &str,
    publish: &str,
) -> Result<(bool, Vec<String>), ScriptError> {
    let letter = keys
        .kind
        .letter()
        .ok_or_else(|| unexpected("family_abandon"))?;
    let mut cmd = evalsha(&SCRIPT, 4);
    cmd.arg(keys.lock())
        .arg(keys.line())
        .arg(keys.places())
        .arg(keys.fence())
        .arg(token)
        .arg(letter)
        .arg(keys.kind.permits())
        .arg(keys.channel())
        .arg(publish);
    decode(invoke(&SCRIPT, &cmd, con).await?)
}

/// The script's reply: whether it held one, and the messages published.
fn decode(reply: Value) -> Result<(bool, Vec<String>), ScriptError> {
    match reply {
        Value::Int(held) => Ok((held == 1, Vec::new())),
        Value::Array(parts) => {
            let mut parts = parts.into_iter();
            let held = match parts.next() {
                Some(Value::Int(held)) => held == 1,
                _ => return Err(unexpected("family_abandon")),
            };
            Ok((held, messages(parts, "family_abandon")?))
        }
        _ => Err(unexpected("family_abandon")),
    }
}
