//! `acquire.lua`: take a free lock, or learn when to look again.

use std::time::Duration;

use redis::aio::ConnectionLike;

use super::{Lua, ScriptError, evalsha, invoke};
use crate::backend::connect::millis;
use crate::backend::{Acquired, FENCE_MEMORY, LockKeys, PLACE_GRACE};

/// The script's source as Redis runs it (with the shared helper first).
pub(super) const SOURCE: &str = concat!(include_str!("typed.lua"), include_str!("acquire.lua"));

pub(super) static SCRIPT: Lua = Lua::new(|| redis::Script::new(SOURCE));

/// Take the lock for `ttl` if it is free and nobody waits in line before
/// `token` (or it is already `token`'s). With `in_line`, a busy reply keeps
/// (or takes) `token`'s place in the lock's line. A new fencing token is
/// above the last one and at least `fence_floor` (`None`: the server clock
/// in µs).
pub(crate) async fn acquire<C: ConnectionLike>(
    con: &mut C,
    keys: &LockKeys,
    token: &str,
    ttl: Duration,
    in_line: bool,
    fence_floor: Option<u64>,
) -> Result<Acquired, ScriptError> {
    let mut cmd = evalsha(&SCRIPT, 4);
    cmd.arg(&keys.lock)
        .arg(&keys.fence)
        .arg(&keys.line)
        .arg(&keys.places)
        .arg(token)
        .arg(millis(ttl))
        .arg(millis(ttl + FENCE_MEMORY))
        .arg(if in_line { millis(PLACE_GRACE) } else { 0 })
        .arg(fence_floor.unwrap_or(0));
    let (code, value): (i64, i64) = invoke(&SCRIPT, &cmd, con).await?;
    match code {
        1 => Ok(Acquired::Yes {
            fence: u64::try_from(value).unwrap_or(0),
        }),
        0 => Ok(Acquired::Busy {
            expires_in: u64::try_from(value).ok().map(Duration::from_millis),
        }),
        _ => Err(ScriptError::WrongType {
            redis_key: match value {
                2 => &keys.fence,
                3 => &keys.line,
                4 => &keys.places,
                _ => &keys.lock,
            }
            .clone(),
        }),
    }
}
