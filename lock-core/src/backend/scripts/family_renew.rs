//! `family_renew.lua`: renew permits and rw-lock sides that are still ours.

use redis::aio::ConnectionLike;

use super::call::{Lua, ScriptError, evalsha, invoke};
use crate::backend::connect::millis;
use crate::backend::{Owned, Renewal};

/// The script's source as Redis runs it (with the shared helpers first).
pub const SOURCE: &str = concat!(
    include_str!("typed.lua"),
    include_str!("family.lua"),
    include_str!("family_renew.lua")
);

pub(super) static SCRIPT: Lua = Lua::new(|| redis::Script::new(SOURCE));

/// Renew every permit or side of `batch` (all in one slot on Cluster) in
/// one script call; one outcome per lease, in order.
pub(crate) async fn family_renew<C: ConnectionLike>(
    con: &mut C,
    batch: &[&Renewal],
) -> Result<Vec<Owned>, ScriptError> {
    let mut cmd = evalsha(&SCRIPT, batch.len());
    for item in batch {
        cmd.arg(item.keys.lock());
    }
    for item in batch {
        // Zero: a check only (see `Renewal::ttl`).
        let ttl = if item.ttl.is_zero() {
            0
        } else {
            millis(item.ttl)
        };
        cmd.arg(&*item.token).arg(ttl);
    }
    let codes: Vec<i64> = invoke(&SCRIPT, &cmd, con).await?;
    Ok(codes.into_iter().map(Owned::from_code).collect())
}
