//! `release.lua`: give a lock back if it is ours, and say who is next.

use std::time::Duration;

use redis::Value;
use redis::aio::ConnectionLike;

use super::call::{Lua, ScriptError, evalsha, invoke, unexpected};
use crate::backend::connect::millis;
use crate::backend::wakeups::Announcement;
use crate::backend::{LockKeys, Owned};

/// The script's source as Redis runs it: the common case (nobody in line)
/// first, then the shared helpers, then the rest, so that the common case
/// does not pay for defining the helpers (see release.lua).
pub const SOURCE: &str = concat!(
    include_str!("release.lua"),
    include_str!("typed.lua"),
    include_str!("marker.lua"),
    include_str!("release_lined.lua")
);

pub(super) static SCRIPT: Lua = Lua::new(|| redis::Script::new(SOURCE));

/// What `release.lua` did.
#[derive(Debug)]
pub(crate) struct Released {
    pub(crate) owned: Owned,
    /// The first waiter in line, told it is next (only when the key was deleted).
    pub(crate) next: Option<String>,
    /// The lock was handed to the first in line: the announcement
    /// published (`grant:…`, see [`Announcement`](crate::backend::wakeups::Announcement)).
    pub(crate) granted: Option<String>,
    /// Not applied yet: the server asked to retry (a slot migrating, a
    /// reconnect) for longer than a caller should wait, and the release goes
    /// on in the background until it lands or the lease runs out.
    pub(crate) in_background: bool,
}

impl Released {
    /// What this client's own waiters hear of it at once (others by
    /// pub/sub): the grant to the first in line, the first in line named,
    /// or the lock free (released by `token`).
    pub(crate) fn announcement<'a>(&'a self, token: &'a str) -> Announcement<'a> {
        match (&self.granted, &self.next) {
            (Some(granted), _) => Announcement::parse(granted),
            (None, Some(next)) => Announcement::Next(next),
            (None, None) => Announcement::Free(token),
        }
    }
}

/// How a release is announced.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Telling {
    /// `PUBLISH`, or `SPUBLISH` on Cluster.
    pub(crate) publish: &'static str,
    pub(crate) announce: Announce,
    /// One server behind the connection (not Cluster).
    pub(crate) one_server: bool,
}

/// Which releases `release.lua` announces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Announce {
    /// Every release (Redlock: no line, its waiters listen for any release).
    Always,
    /// Only when someone waits in line (single server, Sentinel, Cluster:
    /// every waiter keeps a place in line).
    ToTheLine,
}

/// Delete the lock if `token` holds it (or, with a non-zero `keep`, let it
/// expire after `keep`), announcing it on the lock's channel as `telling`
/// says; a plain release announced to the line hands the lock straight to
/// the first in line when its place allows (see `release.lua`). With `mark_survival`, a released lease also leaves the survival
/// mark for that long (shortly after a restart or failover, see gate.rs).
/// On one server (not Cluster), a plain release sends the script's compact
/// form, where it names the line and channel itself (keys it is not given:
/// never on a cluster).
pub(crate) async fn release<C: ConnectionLike>(
    con: &mut C,
    keys: &LockKeys,
    token: &str,
    keep: Duration,
    telling: Telling,
    mark_survival: Option<(Duration, u64)>,
) -> Result<Released, ScriptError> {
    let Telling {
        publish,
        announce,
        one_server,
    } = telling;
    // The compact form (one server, announcing with PUBLISH, no survival
    // mark): the script names the line and channel itself; a third argument
    // asks it to announce every release (Redlock).
    let compact = one_server && publish == "PUBLISH" && mark_survival.is_none();
    let keep = if keep.is_zero() { 0 } else { millis(keep) };
    // One call site: two would each hold a command and a call in the
    // future every release boxes.
    let cmd = if compact {
        let mut cmd = evalsha(&SCRIPT, 1);
        cmd.arg(keys.lock()).arg(token);
        // The shortest form (keep 0, announced to the line) stops at the
        // token: the script's cheapest path (see release.lua).
        if keep > 0 || announce == Announce::Always {
            cmd.arg(keep);
        }
        if announce == Announce::Always {
            cmd.arg(1);
        }
        cmd
    } else {
        let mut cmd = evalsha(&SCRIPT, if mark_survival.is_some() { 5 } else { 4 });
        cmd.arg(keys.lock())
            .arg(keys.line())
            .arg(keys.places())
            .arg(keys.fence());
        if mark_survival.is_some() {
            cmd.arg(keys.survival_mark());
        }
        cmd.arg(token)
            .arg(keep)
            .arg(keys.channel())
            .arg(publish)
            .arg(u8::from(announce == Announce::Always));
        if let Some((life, tag)) = mark_survival {
            cmd.arg(millis(life).max(1)).arg(mark_value(tag));
        }
        cmd
    };
    decode(invoke(&SCRIPT, &cmd, con).await?)
}

/// The survival mark's value: the tag of the server's `run_id` as the
/// releasing client knows it (see `Gate::identity_tag`), so that a mark
/// restored from a snapshot, or left after an earlier change, does not
/// match the server as it is now.
pub(crate) fn mark_value(tag: u64) -> String {
    format!("{tag:016x}")
}

/// The script's reply.
fn decode(reply: Value) -> Result<Released, ScriptError> {
    match reply {
        Value::Int(code) => Ok(Released {
            owned: Owned::from_code(code),
            next: None,
            granted: None,
            in_background: false,
        }),
        Value::BulkString(next) => {
            let next = String::from_utf8(next).map_err(|_| unexpected("release"))?;
            let granted = next.starts_with("grant:").then(|| next.clone());
            Ok(Released {
                owned: Owned::Yes,
                next: if granted.is_some() { None } else { Some(next) },
                granted,
                in_background: false,
            })
        }
        _ => Err(unexpected("release")),
    }
}
