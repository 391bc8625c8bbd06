//! `family_force_release.lua`: an operator's release of every holder of a
//! semaphore or rw lock.

use redis::aio::ConnectionLike;

use super::call::{Lua, ScriptError, evalsha, invoke};
use super::force_release::{Forced, MIN_MARKER, forced_name};
use crate::backend::LockKeys;
use crate::backend::connect::millis;

/// The script's source as Redis runs it.
pub const SOURCE: &str = include_str!("family_force_release.lua");

pub(super) static SCRIPT: Lua = Lua::new(|| redis::Script::new(SOURCE));

/// Take every permit or side from its holder, wake the first in line, and
/// leave the forced marker (a set of the old tokens) for their renewals.
pub(crate) async fn family_force_release<C: ConnectionLike>(
    con: &mut C,
    keys: &LockKeys,
    publish: &str,
) -> Result<Forced, ScriptError> {
    let mut cmd = evalsha(&SCRIPT, 3);
    cmd.arg(keys.lock())
        .arg(keys.line())
        .arg(forced_name(keys))
        .arg(keys.channel())
        .arg(publish)
        .arg(millis(MIN_MARKER));
    let (code, holder, next): (i64, Option<String>, Option<String>) =
        invoke(&SCRIPT, &cmd, con).await?;
    match code {
        1 => Ok(Forced { holder, next }),
        0 => Ok(Forced {
            holder: None,
            next: None,
        }),
        _ => Err(ScriptError::WrongType {
            redis_key: keys.lock().to_owned(),
        }),
    }
}
