//! `renew.lua`: reset the expiry of leases that are still ours.

use redis::aio::ConnectionLike;

use super::{Lua, ScriptError, evalsha, invoke};
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
/// per lease, in order.
pub(crate) async fn renew<C: ConnectionLike>(
    con: &mut C,
    batch: &[Renewal],
) -> Result<Vec<Owned>, ScriptError> {
    let mut out = Vec::with_capacity(batch.len());
    for chunk in batch.chunks(CHUNK) {
        let mut cmd = evalsha(&SCRIPT, chunk.len());
        for item in chunk {
            cmd.arg(&item.keys.lock);
        }
        for item in chunk {
            cmd.arg(&*item.token).arg(millis(item.ttl));
        }
        let codes: Vec<i64> = invoke(&SCRIPT, &cmd, con).await?;
        out.extend(codes.into_iter().map(Owned::from_code));
    }
    Ok(out)
}
