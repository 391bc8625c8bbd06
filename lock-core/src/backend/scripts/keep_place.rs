//! `keep_place.lua`: keep a sleeping waiter's place in line alive.

use std::time::Duration;

use redis::aio::ConnectionLike;

use super::call::{Lua, ScriptError, evalsha, invoke};
use crate::backend::LockKeys;
use crate::backend::connect::millis;

/// The script's source as Redis runs it.
pub const SOURCE: &str = include_str!("keep_place.lua");

pub(super) static SCRIPT: Lua = Lua::new(|| redis::Script::new(SOURCE));

/// What keep_place.lua found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kept {
    /// Kept; the lock's lease ends within this (`Duration::MAX`: no expiry
    /// known).
    Held(Duration),
    /// Kept, and the lock is free (a release whose announcement was lost,
    /// or the lock kept for the first in line).
    Free,
    /// No such place: it lapsed, or a release handed the lock on.
    Gone,
}

/// Keep `token`'s place in the line of `keys` for `life` from now.
pub(crate) async fn keep_place<C: ConnectionLike>(
    con: &mut C,
    keys: &LockKeys,
    token: &str,
    life: Duration,
) -> Result<Kept, ScriptError> {
    let mut cmd = evalsha(&SCRIPT, 2);
    cmd.arg(keys.places())
        .arg(keys.lock())
        .arg(token)
        .arg(millis(life));
    let kept: i64 = invoke(&SCRIPT, &cmd, con).await?;
    Ok(match kept {
        -1 => Kept::Held(Duration::MAX),
        -2 => Kept::Free,
        ms if ms >= 0 => Kept::Held(Duration::from_millis(ms.unsigned_abs())),
        _ => Kept::Gone,
    })
}
