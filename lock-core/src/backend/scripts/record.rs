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

/// The most leases one `record.lua` call carries. Leases taken at a high
/// rate fall due for their record together (S7: 10,000 leases taken in
/// about 150 ms came due in batches of a thousand and more); one call for
/// all of them held the single-threaded server for milliseconds, and every
/// acquisition waited behind it (S7's p99 13 ms). Calls of this size leave
/// room between them and keep within one call per 100 leases.
const RECORD_CHUNK: usize = 100;

/// Renew (or check, for a zero TTL) every lease of `batch` and record the
/// fencing token each carries in `record` (the caller sends only such
/// renewals), [`RECORD_CHUNK`] leases per call. One outcome per lease, as
/// `renew.lua` gives them.
pub(crate) async fn record<C: ConnectionLike>(
    con: &mut C,
    batch: &[&Renewal],
) -> Result<Vec<Owned>, ScriptError> {
    let mut out = Vec::with_capacity(batch.len());
    for chunk in batch.chunks(RECORD_CHUNK) {
        out.extend(record_chunk(con, chunk).await?);
    }
    Ok(out)
}

/// One `record.lua` call for `batch`.
async fn record_chunk<C: ConnectionLike>(
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
