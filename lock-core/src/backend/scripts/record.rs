//! `record.lua`: renew leases taken on the fast path and write their
//! fencing tokens down, for `inspect` (see `fast.rs`).

use redis::aio::ConnectionLike;

use super::{Lua, ScriptError, evalsha, invoke};
use crate::backend::connect::millis;
use crate::backend::{FENCE_MEMORY, Owned, Renewal};

/// The script's source as Redis runs it (with the shared helpers first).
pub const SOURCE: &str = concat!(
    include_str!("typed.lua"),
    include_str!("marker.lua"),
    include_str!("record.lua")
);

pub(super) static SCRIPT: Lua = Lua::new(|| redis::Script::new(SOURCE));

/// Renew (or check, for a zero TTL) every lease of `batch` and record the
/// fencing token each carries in `record` (the caller sends only such
/// renewals). One outcome per lease, as `renew.lua` gives them.
pub(crate) async fn record<C: ConnectionLike>(
    con: &mut C,
    batch: &[&Renewal],
) -> Result<Vec<Owned>, ScriptError> {
    if batch.is_empty() {
        return Ok(Vec::new());
    }
    let records: Vec<String> = batch.iter().map(|r| r.keys.grant_record()).collect();
    let mut cmd = evalsha(&SCRIPT, batch.len() * 2);
    for (renewal, record) in batch.iter().zip(&records) {
        cmd.arg(renewal.keys.lock()).arg(record);
    }
    for renewal in batch {
        let ttl = if renewal.ttl.is_zero() {
            0
        } else {
            millis(renewal.ttl)
        };
        cmd.arg(&*renewal.token)
            .arg(ttl)
            .arg(renewal.record.unwrap_or(0));
    }
    cmd.arg(millis(FENCE_MEMORY));
    let codes: Vec<i64> = invoke(&SCRIPT, &cmd, con).await?;
    Ok(codes.into_iter().map(Owned::from_code).collect())
}
