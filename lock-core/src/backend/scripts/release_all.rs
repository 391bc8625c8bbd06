//! `release_all.lua`: give back every key of a `lock_all` that holds the
//! caller's plain token, in one call.

use redis::Value;
use redis::aio::ConnectionLike;

use super::call::{Lua, ScriptError, evalsha, invoke, unexpected};
use crate::backend::keys::AllKeys;

/// The script's source as Redis runs it.
pub const SOURCE: &str = include_str!("release_all.lua");

pub(super) static SCRIPT: Lua = Lua::new(|| redis::Script::new(SOURCE));

/// Delete every lock key of `all` that holds exactly `token` (unmarked:
/// nobody in its line), one server only (the script is given the lock keys
/// alone). Returns, for each key in `all`'s order, whether it is left
/// untouched (`true`): not ours, marked (someone in line), or another type;
/// those still need `release.lua`, which knows what to do with them.
pub(crate) async fn release_all<C: ConnectionLike>(
    con: &mut C,
    all: &AllKeys,
    token: &str,
) -> Result<Vec<bool>, ScriptError> {
    let mut cmd = evalsha(&SCRIPT, all.keys.len());
    for keys in &all.keys {
        cmd.arg(keys.lock());
    }
    cmd.arg(token);
    let reply: Value = invoke(&SCRIPT, &cmd, con).await?;
    let mut left = vec![false; all.keys.len()];
    match reply {
        Value::Int(0) => {}
        Value::Array(indexes) => {
            for index in indexes {
                let at = match index {
                    Value::Int(i) => usize::try_from(i - 1).ok(),
                    _ => None,
                };
                let slot = at
                    .and_then(|at| left.get_mut(at))
                    .ok_or_else(|| unexpected("release_all"))?;
                *slot = true;
            }
        }
        _ => return Err(unexpected("release_all")),
    }
    Ok(left)
}
