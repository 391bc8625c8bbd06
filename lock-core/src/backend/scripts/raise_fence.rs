//! `raise_fence.lua`: level a fencing counter up to an issued token (Redlock).

use std::time::Duration;

use redis::aio::ConnectionLike;

use super::call::{Lua, ScriptError, evalsha, invoke};
use crate::backend::connect::millis;
use crate::backend::{FENCE_MEMORY, LockKeys, Owned};

/// The script's source as Redis runs it (with the shared helpers first).
pub(super) const SOURCE: &str = concat!(
    include_str!("typed.lua"),
    include_str!("marker.lua"),
    include_str!("raise_fence.lua")
);

pub(super) static SCRIPT: Lua = Lua::new(|| redis::Script::new(SOURCE));

/// Whose lock a fence is raised for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Raise {
    /// Only if the caller's token still holds the lock there.
    IfOurs,
    /// Whoever holds it (a node that did not grant the lock).
    Always,
}

/// Raise the lock's counter to at least `fence` (if `token` still holds it,
/// with [`Raise::IfOurs`]).
pub(crate) async fn raise_fence<C: ConnectionLike>(
    con: &mut C,
    keys: &LockKeys,
    token: &str,
    fence: u64,
    ttl: Duration,
    raise: Raise,
) -> Result<Owned, ScriptError> {
    let mut cmd = evalsha(&SCRIPT, 2);
    cmd.arg(keys.lock())
        .arg(keys.fence())
        .arg(token)
        .arg(fence)
        .arg(millis(ttl + FENCE_MEMORY))
        .arg(u8::from(raise == Raise::Always));
    let code: i64 = invoke(&SCRIPT, &cmd, con).await?;
    Ok(Owned::from_code(code))
}
