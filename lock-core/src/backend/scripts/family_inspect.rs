//! `family_inspect.lua`: read a semaphore or rw lock (holders, line) at once.

use std::time::Duration;

use redis::Value;
use redis::aio::ConnectionLike;

use super::call::{Lua, ScriptError, evalsha, invoke, unexpected, wrong_type};
use crate::backend::{Inspected, LockKeys, SharedHolder};

/// The script's source as Redis runs it.
pub(super) const SOURCE: &str = include_str!("family_inspect.lua");

pub(super) static SCRIPT: Lua = Lua::new(|| redis::Script::new(SOURCE));

/// The semaphore or rw lock as it is now; `None` when nobody holds it.
pub(crate) async fn family_inspect<C: ConnectionLike>(
    con: &mut C,
    keys: &LockKeys,
) -> Result<Option<Inspected>, ScriptError> {
    let mut cmd = evalsha(&SCRIPT, 3);
    cmd.arg(keys.lock()).arg(keys.line()).arg(keys.places());
    let reply: Vec<Value> = invoke(&SCRIPT, &cmd, con).await?;
    let bad = || unexpected("family_inspect");
    match reply.as_slice() {
        [Value::Int(-1), Value::Int(_)] => Err(wrong_type(keys, &reply)),
        [Value::Int(waiters), rest @ ..] if rest.len() % 4 == 0 => {
            let mut holders = Vec::with_capacity(rest.len() / 4);
            for holder in rest.chunks(4) {
                let [token, letter, ms, fence] = holder else {
                    return Err(bad());
                };
                let token: String = redis::from_redis_value_ref(token).map_err(|_| bad())?;
                let letter: String = redis::from_redis_value_ref(letter).map_err(|_| bad())?;
                let ms: u64 = redis::from_redis_value_ref(ms).map_err(|_| bad())?;
                let fence: String = redis::from_redis_value_ref(fence).map_err(|_| bad())?;
                holders.push(SharedHolder {
                    token,
                    letter: letter.chars().next().unwrap_or('s'),
                    ttl: Duration::from_millis(ms),
                    fence: fence.parse().map_err(|_| bad())?,
                });
            }
            Ok(Inspected::of_family(
                keys.key(),
                holders,
                usize::try_from(*waiters).unwrap_or(0),
            ))
        }
        _ => Err(bad()),
    }
}
