//! `lock_all.lua`: take several plain locks at once, or none.

use std::time::Duration;

use redis::Value;
use redis::aio::ConnectionLike;

use super::call::{Lua, ScriptError, evalsha, invoke, unexpected};
use crate::backend::connect::millis;
use crate::backend::keys::AllKeys;
use crate::backend::{Acquired, FENCE_MEMORY, PLACE_GRACE};

/// The script's source as Redis runs it: the free case first, then the
/// shared helpers, then the rest, so that the free case does not pay for
/// defining the helpers (see lock_all.lua).
pub const SOURCE: &str = concat!(
    include_str!("lock_all.lua"),
    include_str!("typed.lua"),
    include_str!("marker.lua"),
    include_str!("lock_all_busy.lua")
);

pub(super) static SCRIPT: Lua = Lua::new(|| redis::Script::new(SOURCE));

/// How the call names its keys (see lock_all.lua).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Form<'a> {
    /// One server (not Cluster), releases announced with `PUBLISH`: the
    /// lock keys alone, and the mode after the native free case, if any.
    Compact(Option<Claimed>),
    /// Every name given (Redis Cluster, one slot), with the publish
    /// command.
    Full { publish: &'a str },
}

/// The mode of a call after the native free case may have taken keys
/// (see lock_all.lua).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Claimed {
    /// Take the caller's keys back, decide again.
    Claimed,
    /// The same after a lost reply: a key that was the first attempt's
    /// grant is kept.
    Resent,
}

/// Take every lock of `all` for `ttl` if each is free and nobody waits
/// before `token` in its line; with `in_line`, a busy reply keeps (or
/// takes) `token`'s place in the line of every key, all at once (first
/// come, first served across the keys). A grant's fencing tokens are
/// recorded in `all`, the first is returned. In the compact form (one
/// server), the lock keys alone, the other names derived from them by the
/// script; its mode after the native free case of `lock_all_fast.rs`
/// takes the caller's keys back first and decides again (except a key a
/// release handed over, and, resent after a lost reply, a key that was the
/// first attempt's grant). In line in the compact form, `placed.sent_us`
/// names the attempt: a release may then hand the caller every key at once
/// (`grant:…`, one fencing token for all, heard on any key's channel).
pub(crate) async fn lock_all<C: ConnectionLike>(
    con: &mut C,
    all: &AllKeys,
    token: &str,
    ttl: Duration,
    placed: super::Placed,
    form: Form<'_>,
) -> Result<Acquired, ScriptError> {
    let in_line = placed.in_line;
    let (compact, publish, claimed) = match form {
        Form::Compact(claimed) => (true, "PUBLISH", claimed),
        Form::Full { publish } => (false, publish, None),
    };
    let mut cmd = evalsha(&SCRIPT, if compact { 1 } else { 4 } * all.keys.len());
    for keys in &all.keys {
        cmd.arg(keys.lock());
        if !compact {
            cmd.arg(keys.fence()).arg(keys.line()).arg(keys.places());
        }
    }
    cmd.arg(token)
        .arg(millis(ttl))
        .arg(millis(ttl + FENCE_MEMORY))
        .arg(if in_line { millis(PLACE_GRACE) } else { 0 });
    if !compact {
        cmd.arg(publish);
        for keys in &all.keys {
            cmd.arg(keys.channel());
        }
    }
    // In line in the compact form, the attempt's name (ARGV[7]): a busy
    // reply writes the records by which a release hands every key over.
    let name = placed.sent_us.filter(|_| compact && in_line);
    if in_line {
        cmd.arg(millis(placed.life));
    } else if claimed.is_some() {
        cmd.arg("");
    }
    match claimed {
        Some(Claimed::Claimed) => {
            cmd.arg("1");
        }
        Some(Claimed::Resent) => {
            cmd.arg("2");
        }
        None if name.is_some() => {
            cmd.arg("");
        }
        None => {}
    }
    if let Some(sent_us) = name {
        cmd.arg(sent_us);
    }
    let reply: Value = invoke(&SCRIPT, &cmd, con).await?;
    match reply {
        Value::Int(ms) => Ok(Acquired::Busy {
            expires_in: u64::try_from(ms).ok().map(Duration::from_millis),
        }),
        Value::Array(parts) => match parts.as_slice() {
            [Value::Int(-1), Value::Int(index)] => {
                let at = usize::try_from(*index - 1).map_err(|_| unexpected("lock_all"))?;
                let keys = all.keys.get(at / 4).ok_or_else(|| unexpected("lock_all"))?;
                let redis_key = match at % 4 {
                    0 => keys.lock(),
                    1 => keys.fence(),
                    2 => keys.line(),
                    _ => keys.places(),
                };
                Err(ScriptError::WrongType {
                    redis_key: redis_key.to_owned(),
                })
            }
            fences => {
                let fences = fences
                    .iter()
                    .map(|fence| {
                        redis::from_redis_value_ref::<String>(fence)
                            .ok()
                            .and_then(|f| f.parse::<u64>().ok())
                            .ok_or_else(|| unexpected("lock_all"))
                    })
                    .collect::<Result<Vec<u64>, ScriptError>>()?;
                let first = fences
                    .first()
                    .copied()
                    .ok_or_else(|| unexpected("lock_all"))?;
                all.granted(fences);
                Ok(Acquired::Yes { fence: first })
            }
        },
        _ => Err(unexpected("lock_all")),
    }
}
