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

/// Take every lock of `all` for `ttl` if each is free and nobody waits
/// before `token` in its line; with `in_line`, a busy reply keeps (or
/// takes) `token`'s place in the line of every key, all at once (first
/// come, first served across the keys). A grant's fencing tokens are
/// recorded in `all`, the first is returned. With `one_server` (not
/// Cluster) and `PUBLISH`, the script's compact form: the lock keys alone,
/// the other names derived from them by the script.
pub(crate) async fn lock_all<C: ConnectionLike>(
    con: &mut C,
    all: &AllKeys,
    token: &str,
    ttl: Duration,
    placed: super::Placed,
    publish: &str,
    one_server: bool,
) -> Result<Acquired, ScriptError> {
    let in_line = placed.in_line;
    let compact = one_server && publish == "PUBLISH";
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
    if in_line {
        cmd.arg(millis(placed.life));
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
