//! `family_release.lua`: give back a permit or a rw-lock side, and hand it
//! on to those in line that may go now.

use std::time::Duration;

use redis::Value;
use redis::aio::ConnectionLike;

use super::call::{Lua, ScriptError, evalsha, invoke, unexpected};
use crate::backend::connect::millis;
use crate::backend::{LockKeys, Owned};

/// The script's source as Redis runs it (with the shared helpers first).
pub const SOURCE: &str = concat!(
    include_str!("typed.lua"),
    include_str!("family.lua"),
    include_str!("family_release.lua"),
    include_str!("family_hand_on.lua")
);

pub(super) static SCRIPT: Lua = Lua::new(|| redis::Script::new(SOURCE));

/// What `family_release.lua` did.
#[derive(Debug)]
pub(crate) struct FamilyReleased {
    pub(crate) owned: Owned,
    /// The messages published to those in line that may go now, in line
    /// order: each one's grant (`grant:…`), or `next:<token>` for one that
    /// looks itself (see [`Announcement`](crate::backend::wakeups::Announcement)).
    pub(crate) told: Vec<String>,
}

/// Give back `token`'s permit or side if it is still ours (or, with a
/// non-zero `keep`, let it end after `keep`); every waiter that may go now
/// is handed its grant, told on the release channel with `publish` and
/// named in the reply. On one server (`one_server`, not Cluster) it sends the script's
/// compact form, where the script names the line and the channel itself;
/// there, with `native` (plain commands may stand in, and the lease is
/// still valid on its holder's clock) and no keep, it gives the permit
/// back without the script ([`family_release_native`]). With `here` (the
/// name of this client's wake-ups), a grant handed to a waiter whose place
/// carries the same name is not published: the caller announces the reply's
/// messages to its own wake-ups.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn family_release<C: ConnectionLike>(
    con: &mut C,
    keys: &LockKeys,
    token: &str,
    keep: Duration,
    here: Option<&str>,
    publish: &str,
    one_server: bool,
    native: bool,
) -> Result<FamilyReleased, ScriptError> {
    let compact = one_server && publish == "PUBLISH";
    if native
        && compact
        && keep.is_zero()
        && let Some(released) = family_release_native(con, keys, token, here).await?
    {
        return Ok(released);
    }
    let letter = keys
        .kind
        .letter()
        .ok_or_else(|| unexpected("family_release"))?;
    let mut cmd = evalsha(&SCRIPT, if compact { 1 } else { 4 });
    cmd.arg(keys.lock());
    if !compact {
        cmd.arg(keys.line()).arg(keys.places()).arg(keys.fence());
    }
    cmd.arg(token)
        .arg(letter)
        .arg(if keep.is_zero() { 0 } else { millis(keep) })
        .arg(keys.kind.permits());
    if !compact {
        cmd.arg(keys.channel()).arg(publish);
    }
    if let Some(here) = here {
        cmd.arg(here);
    }
    decode(invoke(&SCRIPT, &cmd, con).await?)
}

/// Give back `token`'s permit or side with native commands, still one
/// atomic step on the server: `HDEL holders token` is that step (the field is named by the
/// owner token, so no other holder's share can be touched), pipelined with
/// `EXISTS line`; when the line key exists, the script in its wake mode
/// (keep -1) hands it on to those in line that may go now. The script runs
/// even when the `HDEL` removed nothing (a resend after a lost reply): the
/// first one's wake-up may have been lost with it.
///
/// Only for a lease its holder's clock still holds valid (the server's
/// lease end, which `HDEL` does not read, is then ahead too), without a
/// keep, on one server (the compact form: the script names the line and
/// channel itself). `None`: the server refused the `HDEL` (a key of another
/// type, an ACL rule): send [`family_release`], which reports it.
async fn family_release_native<C: ConnectionLike>(
    con: &mut C,
    keys: &LockKeys,
    token: &str,
    here: Option<&str>,
) -> Result<Option<FamilyReleased>, ScriptError> {
    let lock = keys.lock();
    let mut remove = redis::Cmd::with_capacity(3, 8 + lock.len() + token.len());
    remove.arg("HDEL").arg(lock).arg(token);
    let mut line = redis::Cmd::with_capacity(2, 8 + keys.line().len());
    line.arg("EXISTS").arg(keys.line());
    let mut pipe = redis::Pipeline::with_capacity(2);
    pipe.ignore_errors();
    pipe.add_command(remove).add_command(line);
    let replies: Vec<Value> = pipe.query_async(con).await?;
    let (removed, someone_waits) = match replies.as_slice() {
        [Value::Int(removed), Value::Int(exists)] => (*removed == 1, *exists != 0),
        // EXISTS refused: wake as if someone waited (the script decides).
        [Value::Int(removed), _] => (*removed == 1, true),
        _ => return Ok(None),
    };
    let owned = if removed { Owned::Yes } else { Owned::No };
    if !someone_waits {
        return Ok(Some(FamilyReleased {
            owned,
            told: Vec::new(),
        }));
    }
    let letter = keys
        .kind
        .letter()
        .ok_or_else(|| unexpected("family_release"))?;
    let mut cmd = evalsha(&SCRIPT, 1);
    cmd.arg(lock)
        .arg(token)
        .arg(letter)
        .arg(-1)
        .arg(keys.kind.permits());
    if let Some(here) = here {
        cmd.arg(here);
    }
    let woken = decode(invoke(&SCRIPT, &cmd, con).await?)?;
    Ok(Some(FamilyReleased { owned, ..woken }))
}

/// The script's reply.
fn decode(reply: Value) -> Result<FamilyReleased, ScriptError> {
    match reply {
        Value::Int(code) => Ok(FamilyReleased {
            owned: Owned::from_code(code),
            told: Vec::new(),
        }),
        Value::Array(told) => Ok(FamilyReleased {
            owned: Owned::Yes,
            told: messages(told, "family_release")?,
        }),
        _ => Err(unexpected("family_release")),
    }
}

/// The messages `family_hand_on.lua` published (a release's or an
/// abandon's reply), in line order; `script` names the one that answered.
pub(super) fn messages(
    told: impl IntoIterator<Item = Value>,
    script: &'static str,
) -> Result<Vec<String>, ScriptError> {
    told.into_iter()
        .map(|message| match message {
            Value::BulkString(bytes) => String::from_utf8(bytes).ok(),
            _ => None,
        })
        .collect::<Option<Vec<String>>>()
        .ok_or_else(|| unexpected(script))
}
