//! `inspect.lua`: read one lock (holder, lease left, fence, line) at once.

use std::time::Duration;

use redis::Value;
use redis::aio::ConnectionLike;

use super::call::{Lua, ScriptError, evalsha, invoke, unexpected, wrong_type};
use crate::backend::{Inspected, LockKeys};

/// The script's source as Redis runs it (with the shared helper first).
pub(super) const SOURCE: &str = concat!(include_str!("marker.lua"), include_str!("inspect.lua"));

pub(super) static SCRIPT: Lua = Lua::new(|| redis::Script::new(SOURCE));

/// The lock as it is now; `None` when it is free. With `records`, grants
/// may have left their fencing token unwritten (the fast path): the
/// holder's grant record is read too, and the flag beside the reply says
/// whether the token is known (`false`: not recorded yet, the fence shown
/// is the last one a script wrote).
pub(crate) async fn inspect<C: ConnectionLike>(
    con: &mut C,
    keys: &LockKeys,
    records: bool,
) -> Result<Option<(Inspected, bool)>, ScriptError> {
    let mut cmd = evalsha(&SCRIPT, if records { 5 } else { 4 });
    cmd.arg(keys.lock())
        .arg(keys.fence())
        .arg(keys.line())
        .arg(keys.places());
    if records {
        cmd.arg(keys.grant_record());
    }
    let reply: Vec<Value> = invoke(&SCRIPT, &cmd, con).await?;
    match reply.as_slice() {
        [] => Ok(None),
        [Value::Int(-1), Value::Int(_)] => Err(wrong_type(keys, &reply)),
        [token, pttl, fence, waiters, recorded] => {
            let recorded: String =
                redis::from_redis_value_ref(recorded).map_err(redis::RedisError::from)?;
            let known = !records || !recorded.is_empty();
            let recorded = Value::BulkString(recorded.into_bytes());
            let fence = if known && records { &recorded } else { fence };
            let inspected = decode(keys, token, pttl, fence, waiters)?;
            Ok(Some((inspected, known)))
        }
        _ => Err(unexpected("inspect")),
    }
}

/// One held lock's fields.
fn decode(
    keys: &LockKeys,
    token: &Value,
    pttl: &Value,
    fence: &Value,
    waiters: &Value,
) -> Result<Inspected, ScriptError> {
    let token: String = redis::from_redis_value_ref(token).map_err(redis::RedisError::from)?;
    let pttl: i64 = redis::from_redis_value_ref(pttl).map_err(redis::RedisError::from)?;
    let fence: String = redis::from_redis_value_ref(fence).map_err(redis::RedisError::from)?;
    let waiters: i64 = redis::from_redis_value_ref(waiters).map_err(redis::RedisError::from)?;
    Ok(Inspected {
        key: keys.key().to_owned(),
        token,
        // -1: no expiry (not set by leasehold); shown as zero left.
        ttl: Duration::from_millis(u64::try_from(pttl).unwrap_or(0)),
        fence: fence.parse().unwrap_or(0),
        waiters: usize::try_from(waiters).unwrap_or(0),
        shared: Vec::new(),
    })
}
