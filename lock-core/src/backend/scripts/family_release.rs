//! `family_release.lua`: give back a permit or a rw-lock side, and name the
//! next in line if it may go.

use std::time::Duration;

use redis::Value;
use redis::aio::ConnectionLike;

use super::{Lua, Released, ScriptError, evalsha, invoke, unexpected};
use crate::backend::connect::millis;
use crate::backend::{LockKeys, Owned};

/// The script's source as Redis runs it (with the shared helpers first).
pub const SOURCE: &str = concat!(
    include_str!("typed.lua"),
    include_str!("family.lua"),
    include_str!("family_release.lua")
);

pub(super) static SCRIPT: Lua = Lua::new(|| redis::Script::new(SOURCE));

/// Give back `token`'s permit or side if it is still ours (or, with a
/// non-zero `keep`, let it end after `keep`); the next in line, if it may
/// go now, is told on the release channel with `publish` and named in the
/// reply. On one server (`one_server`, not Cluster) it sends the script's
/// compact form, where the script names the line and the channel itself.
pub(crate) async fn family_release<C: ConnectionLike>(
    con: &mut C,
    keys: &LockKeys,
    token: &str,
    keep: Duration,
    publish: &str,
    one_server: bool,
) -> Result<Released, ScriptError> {
    let letter = keys
        .kind
        .letter()
        .ok_or_else(|| unexpected("family_release"))?;
    let compact = one_server && publish == "PUBLISH";
    let mut cmd = evalsha(&SCRIPT, if compact { 1 } else { 3 });
    cmd.arg(keys.lock());
    if !compact {
        cmd.arg(keys.line()).arg(keys.places());
    }
    cmd.arg(token)
        .arg(letter)
        .arg(if keep.is_zero() { 0 } else { millis(keep) })
        .arg(keys.kind.permits());
    if !compact {
        cmd.arg(keys.channel()).arg(publish);
    }
    let reply: Value = invoke(&SCRIPT, &cmd, con).await?;
    match reply {
        Value::Int(code) => Ok(Released {
            owned: Owned::from_code(code),
            next: None,
            granted: None,
            in_background: false,
        }),
        Value::BulkString(next) => Ok(Released {
            owned: Owned::Yes,
            next: Some(String::from_utf8(next).map_err(|_| unexpected("family_release"))?),
            granted: None,
            in_background: false,
        }),
        _ => Err(unexpected("family_release")),
    }
}
