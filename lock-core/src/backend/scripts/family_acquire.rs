//! `family_acquire.lua`: take a semaphore permit or a rw-lock side, in turn.

use std::time::Duration;

use redis::Value;
use redis::aio::ConnectionLike;

use super::call::{Lua, ScriptError, evalsha, invoke, unexpected, wrong_type};
use crate::backend::connect::millis;
use crate::backend::{Acquired, FENCE_MEMORY, LockKeys, PLACE_GRACE};

/// The script's source as Redis runs it: the free case first, then the
/// shared helpers, then the rest, so that the free case does not pay for
/// defining the helpers (see family_acquire.lua).
pub const SOURCE: &str = concat!(
    include_str!("family_acquire.lua"),
    include_str!("typed.lua"),
    include_str!("family.lua"),
    include_str!("family_acquire_contended.lua")
);

pub(super) static SCRIPT: Lua = Lua::new(|| redis::Script::new(SOURCE));

/// Take what `keys.kind` names (a permit, a read share, the write side) for
/// `ttl` if it may be granted now without passing over a waiter; with
/// `in_line`, a busy reply keeps (or takes) `token`'s place in line. A grant
/// that lets the next in line go too tells it on the release channel
/// (`publish`: `PUBLISH` or `SPUBLISH`). On one server (`one_server`, not
/// Cluster) it sends the script's compact form, where the script names the
/// other keys and the channel itself (measured in S9: fewer arguments are
/// cheaper for Redis to pass). In line, the place carries `placed.sent_us`
/// (this attempt's name, see [`Attempt`](crate::backend::Attempt); 0 for
/// none), so that a release may hand the waiter its grant, and lives
/// `placed.life` unless its client keeps it. With `here` (the name of the
/// client's wake-ups, see [`Listener`](crate::backend::listener::Listener)),
/// the place carries it too: a release sent by the same client then tells
/// this waiter its grant through its own reply, without `PUBLISH`.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn family_acquire<C: ConnectionLike>(
    con: &mut C,
    keys: &LockKeys,
    token: &str,
    ttl: Duration,
    placed: super::Placed,
    here: Option<&str>,
    publish: &str,
    one_server: bool,
) -> Result<Acquired, ScriptError> {
    let in_line = placed.in_line;
    let letter = keys
        .kind
        .letter()
        .ok_or_else(|| unexpected("family_acquire"))?;
    let compact = one_server && publish == "PUBLISH";
    let mut cmd = evalsha(&SCRIPT, if compact { 1 } else { 4 });
    cmd.arg(keys.lock());
    if !compact {
        cmd.arg(keys.fence()).arg(keys.line()).arg(keys.places());
    }
    cmd.arg(token)
        .arg(letter)
        .arg(millis(ttl))
        .arg(millis(ttl + FENCE_MEMORY))
        .arg(if in_line { millis(PLACE_GRACE) } else { 0 })
        .arg(keys.kind.permits());
    if !compact {
        cmd.arg(keys.channel()).arg(publish);
    } else if in_line {
        cmd.arg("").arg("");
    }
    if in_line {
        cmd.arg(millis(placed.life))
            .arg(placed.sent_us.unwrap_or(0));
        if let (Some(_), Some(here)) = (placed.sent_us, here) {
            cmd.arg(here);
        }
    }
    let reply: Value = invoke(&SCRIPT, &cmd, con).await?;
    match reply {
        Value::BulkString(fence) => Ok(Acquired::Yes {
            fence: std::str::from_utf8(&fence)
                .ok()
                .and_then(|f| f.parse().ok())
                .ok_or_else(|| unexpected("family_acquire"))?,
        }),
        Value::Int(ms) => Ok(Acquired::Busy {
            expires_in: u64::try_from(ms).ok().map(Duration::from_millis),
        }),
        Value::Array(parts) => Err(wrong_type(keys, &parts)),
        _ => Err(unexpected("family_acquire")),
    }
}
