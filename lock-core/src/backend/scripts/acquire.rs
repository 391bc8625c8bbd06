//! `acquire.lua`: take a free lock, or learn when to look again.

use std::time::Duration;

use redis::Value;
use redis::aio::ConnectionLike;

use super::call::{Lua, ScriptError, evalsha, invoke, unexpected, wrong_type};
use crate::backend::connect::millis;
use crate::backend::{Acquired, FENCE_MEMORY, LockKeys, PLACE_GRACE};

/// The script's source as Redis runs it: the free lock first, then the
/// shared helpers, then the rest, so that the common case does not pay for
/// defining the helpers (see acquire.lua).
pub const SOURCE: &str = concat!(
    include_str!("acquire.lua"),
    include_str!("typed.lua"),
    include_str!("marker.lua"),
    include_str!("acquire_contended.lua")
);

pub(super) static SCRIPT: Lua = Lua::new(|| redis::Script::new(SOURCE));

/// Whether an attempt keeps a place in line, and its name there.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Placed {
    /// A busy reply keeps (or takes) the caller's place in line.
    pub(crate) in_line: bool,
    /// When the attempt was sent, in µs since its waiter started: written
    /// with the place, and named by a release that hands the lock on.
    /// `None`: the place may not be handed the lock (a `lock_all` taking
    /// its keys one by one on Cluster), its waiter is only woken.
    pub(crate) sent_us: Option<u64>,
    /// The place's life (see `Backend::place_life`).
    pub(crate) life: Duration,
}

/// Take the lock for `ttl` if it is free and nobody waits in line before
/// `token` (or it is already `token`'s). With `in_line`, a busy reply keeps
/// (or takes) `token`'s place in the lock's line. A new fencing token is
/// above the last one and at least `fence_floor` (`None`: the server clock
/// in µs). With `claimed` (the publish command), the call follows a fast
/// acquisition ([`super::fast`]) that may have taken the lock already: that
/// key is taken back and the call decides as if it had not been there; or,
/// `resent`, it is sent again after an attempt's reply was lost, and a key
/// that was that attempt's grant stays the caller's.
pub(crate) async fn acquire<C: ConnectionLike>(
    con: &mut C,
    keys: &LockKeys,
    token: &str,
    ttl: Duration,
    placed: Placed,
    fence_floor: Option<u64>,
    claimed: Option<(&str, bool)>,
) -> Result<Acquired, ScriptError> {
    let in_line = placed.in_line;
    let sent_us = placed.sent_us.filter(|_| in_line);
    let mut cmd = evalsha(&SCRIPT, 4);
    cmd.arg(keys.lock())
        .arg(keys.fence())
        .arg(keys.line())
        .arg(keys.places())
        .arg(token)
        .arg(millis(ttl))
        .arg(millis(ttl + FENCE_MEMORY))
        .arg(if in_line { millis(PLACE_GRACE) } else { 0 })
        .arg(fence_floor.unwrap_or(0));
    if let Some((publish, resent)) = claimed {
        // '2': a resend after a lost reply (see acquire.lua).
        cmd.arg(if resent { 2 } else { 1 })
            .arg(keys.channel())
            .arg(publish);
    } else if in_line {
        cmd.arg(0).arg("").arg("");
    }
    if in_line {
        // The attempt's name ('' for none) and the place life.
        match sent_us {
            Some(sent_us) => cmd.arg(sent_us),
            None => cmd.arg(""),
        };
        cmd.arg(millis(placed.life));
    }
    let reply: Value = invoke(&SCRIPT, &cmd, con).await?;
    match reply {
        // The fence, as a decimal string.
        Value::BulkString(fence) => Ok(Acquired::Yes {
            fence: std::str::from_utf8(&fence)
                .ok()
                .and_then(|f| f.parse().ok())
                .unwrap_or(0),
        }),
        // Not now: look again within this many ms (negative: no expiry known).
        Value::Int(ms) => Ok(Acquired::Busy {
            expires_in: u64::try_from(ms).ok().map(Duration::from_millis),
        }),
        Value::Array(parts) => Err(wrong_type(keys, &parts)),
        _ => Err(unexpected("acquire")),
    }
}
