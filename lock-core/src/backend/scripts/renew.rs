//! `renew.lua`: reset the expiry of leases that are still ours.

use redis::aio::ConnectionLike;

use super::call::{Lua, ScriptError, evalsha, invoke};
use super::native::{self, Native, Offered};
use crate::backend::connect::millis;
use crate::backend::{Owned, Renewal};

/// The script's source as Redis runs it (with the shared helpers first).
pub const SOURCE: &str = concat!(
    include_str!("typed.lua"),
    include_str!("marker.lua"),
    include_str!("renew.lua")
);

pub(super) static SCRIPT: Lua = Lua::new(|| redis::Script::new(SOURCE));

/// Leases per script call: large enough that 10,000 leases cost a handful of
/// calls, small enough that one call stays well under a millisecond of
/// server time.
const CHUNK: usize = 1000;

/// Renew every lease of `batch` (all in one slot on Cluster); one outcome
/// per lease, in order. A lone lease (an `extend`, a watchdog holding one
/// lease on this server or slot) goes first as the native `SET … IFEQ`
/// where `offered` has it, and to the script only if that did nothing. A
/// larger batch is one script call: its `EVALSHA` costs once for up to
/// [`CHUNK`] leases. A check (a zero `ttl`) is always the script's.
pub(crate) async fn renew<C: ConnectionLike>(
    con: &mut C,
    batch: &[Renewal],
    offered: &Offered,
) -> Result<Vec<Owned>, ScriptError> {
    if batch.iter().all(|renewal| renewal.record.is_none()) {
        return renew_leases(con, batch, offered).await;
    }
    // Some carry a fencing token to write down (leases taken on the fast
    // path, held a moment): those go to record.lua, which renews them too.
    type Indexed<'a> = Vec<(usize, &'a Renewal)>;
    let (recorded, plain): (Indexed<'_>, Indexed<'_>) = batch
        .iter()
        .enumerate()
        .partition(|(_, renewal)| renewal.record.is_some());
    let mut out = vec![Owned::No; batch.len()];
    let records: Vec<&Renewal> = recorded.iter().map(|(_, r)| *r).collect();
    for ((i, _), owned) in recorded
        .iter()
        .zip(super::record(con, &records, offered).await?)
    {
        out[*i] = owned;
    }
    if !plain.is_empty() {
        let plain_batch: Vec<Renewal> = plain.iter().map(|(_, r)| (*r).clone()).collect();
        let renewed = renew_leases(con, &plain_batch, offered).await?;
        for ((i, _), owned) in plain.iter().zip(renewed) {
            out[*i] = owned;
        }
    }
    Ok(out)
}

async fn renew_leases<C: ConnectionLike>(
    con: &mut C,
    batch: &[Renewal],
    offered: &Offered,
) -> Result<Vec<Owned>, ScriptError> {
    // A check only (zero, see `Renewal::ttl`) is the script's: the native
    // command would set the expiry.
    if let [one] = batch
        && !one.ttl.is_zero()
    {
        let done = native::renew(con, offered, one.keys.lock(), &one.token, one.ttl).await?;
        if done == Native::Done {
            return Ok(vec![Owned::Yes]);
        }
    }
    let mut out = Vec::with_capacity(batch.len());
    for chunk in batch.chunks(CHUNK) {
        let mut cmd = evalsha(&SCRIPT, chunk.len());
        for item in chunk {
            cmd.arg(item.keys.lock());
        }
        for item in chunk {
            // Zero: a check only (see `Renewal::ttl`).
            let ttl = if item.ttl.is_zero() {
                0
            } else {
                millis(item.ttl)
            };
            cmd.arg(&*item.token).arg(ttl);
        }
        let codes: Vec<i64> = invoke(&SCRIPT, &cmd, con).await?;
        out.extend(codes.into_iter().map(Owned::from_code));
    }
    Ok(out)
}
