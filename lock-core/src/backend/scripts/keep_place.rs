//! `keep_place.lua`: keep a sleeping waiter's place in line alive.

use std::time::Duration;

use redis::aio::ConnectionLike;

use super::call::{Lua, ScriptError, evalsha, invoke};
use crate::backend::LockKeys;
use crate::backend::connect::millis;

/// The script's source as Redis runs it.
pub const SOURCE: &str = include_str!("keep_place.lua");

pub(super) static SCRIPT: Lua = Lua::new(|| redis::Script::new(SOURCE));

/// Keep `token`'s place in the line of `keys` for `life` from now.
/// `None`: look again now (there is no place: it lapsed, or a release
/// handed the lock on; or the lock is free); else how long the lock's
/// lease has left (`Duration::MAX`: no expiry known).
pub(crate) async fn keep_place<C: ConnectionLike>(
    con: &mut C,
    keys: &LockKeys,
    token: &str,
    life: Duration,
) -> Result<Option<Duration>, ScriptError> {
    let mut cmd = evalsha(&SCRIPT, 2);
    cmd.arg(keys.places())
        .arg(keys.lock())
        .arg(token)
        .arg(millis(life));
    let kept: i64 = invoke(&SCRIPT, &cmd, con).await?;
    Ok(match kept {
        -1 => Some(Duration::MAX),
        ms if ms >= 0 => Some(Duration::from_millis(ms.unsigned_abs())),
        _ => None,
    })
}
