//! The Lua scripts: one `.lua` file per operation, each run atomically by
//! Redis through `EVALSHA` of a script loaded with `SCRIPT LOAD` (at
//! connect, and again on `NOSCRIPT`: Redis ≥ 8 and Valkey 9 evict scripts
//! cached by `EVAL`, never `SCRIPT LOAD`ed ones; nothing here uses `EVAL`),
//! and beside each one typed Rust function that builds its call (KEYS and
//! ARGV in the order the `.lua` header documents) and decodes its reply.
//! Backends call only these functions.
//!
//! Every check-then-act on a lock is one of these scripts: there is no
//! `GET`-then-`DEL` anywhere. Every script is safe to send twice (a retry
//! after a lost reply): acquire recognises its own token, the others only act
//! on the caller's own token.
//!
//! [`native`] holds the native twins of release and renew, for servers that
//! offer conditional commands; the scripts stay the whole truth.

mod abandon;
mod acquire;
mod call;
mod family_abandon;
mod family_acquire;
mod family_force_release;
mod family_inspect;
mod family_release;
mod family_renew;
pub(crate) mod fast;
mod force_release;
mod inspect;
mod keep_place;
mod lock_all;
pub(crate) mod lock_all_fast;
pub(crate) mod native;
mod raise_fence;
mod record;
mod release;
mod release_all;
mod renew;

use redis::aio::ConnectionLike;
use redis::{RedisError, Script, ServerErrorKind};

/// abandon.lua as Redis runs it (helpers first): the protocol model's
/// conformance test (tests/model) sends it by hand.
pub use abandon::SOURCE as ABANDON_SOURCE;
pub(crate) use abandon::abandon;
/// acquire.lua and release.lua as Redis runs them (helpers first): the
/// benchmark's `raw-scripts` floor and the model's conformance test send
/// these by hand.
pub use acquire::SOURCE as ACQUIRE_SOURCE;
pub(crate) use acquire::{Placed, acquire};
pub(crate) use call::ScriptError;
/// The family's scripts as Redis runs them (helpers first), for the
/// family model's conformance test (tests/model).
pub use family_abandon::SOURCE as FAMILY_ABANDON_SOURCE;
pub(crate) use family_abandon::family_abandon;
pub use family_acquire::SOURCE as FAMILY_ACQUIRE_SOURCE;
pub(crate) use family_acquire::family_acquire;
pub use family_force_release::SOURCE as FAMILY_FORCE_RELEASE_SOURCE;
pub(crate) use family_force_release::family_force_release;
pub(crate) use family_inspect::family_inspect;
pub use family_release::SOURCE as FAMILY_RELEASE_SOURCE;
pub(crate) use family_release::family_release;
pub use family_renew::SOURCE as FAMILY_RENEW_SOURCE;
pub(crate) use family_renew::family_renew;
pub(crate) use force_release::{force_release, was_forced};
pub(crate) use inspect::inspect;
/// keep_place.lua as Redis runs it, for the model's conformance test.
pub use keep_place::SOURCE as KEEP_PLACE_SOURCE;
pub(crate) use keep_place::{Kept, keep_place};
/// lock_all.lua as Redis runs it, for a focused test in tests/model.
pub use lock_all::SOURCE as LOCK_ALL_SOURCE;
pub(crate) use lock_all::{Claimed, Form, lock_all};
pub(crate) use native::{Native, Natives, Offered};
pub(crate) use raise_fence::{Raise, raise_fence};
pub(crate) use record::record;
pub use release::SOURCE as RELEASE_SOURCE;
pub(crate) use release::{Announce, Released, Telling, mark_value, release};
/// release_all.lua as Redis runs it, for the tests that count its calls.
pub use release_all::SOURCE as RELEASE_ALL_SOURCE;
pub(crate) use release_all::release_all;
/// renew.lua as Redis runs it, for the model's conformance test.
pub use renew::SOURCE as RENEW_SOURCE;
pub(crate) use renew::renew;

use super::LockKeys;
use super::connect::{ACL_REFUSED, backend_error};
use crate::error::LockError;

/// Every script, for preloading on all nodes of a cluster.
#[cfg(feature = "cluster")]
pub(crate) fn all() -> [&'static Script; 17] {
    [
        &keep_place::SCRIPT,
        &family_acquire::SCRIPT,
        &family_release::SCRIPT,
        &family_renew::SCRIPT,
        &family_abandon::SCRIPT,
        &family_inspect::SCRIPT,
        &lock_all::SCRIPT,
        &family_force_release::SCRIPT,
        &acquire::SCRIPT,
        &release::SCRIPT,
        &release_all::SCRIPT,
        &renew::SCRIPT,
        &record::SCRIPT,
        &abandon::SCRIPT,
        &raise_fence::SCRIPT,
        &inspect::SCRIPT,
        &force_release::SCRIPT,
    ]
}

/// Load every script with `SCRIPT LOAD`, at connect: later calls find
/// them cached, and a server that cannot run Lua (Valkey ≥ 9.1 ships Lua as
/// a module some distributions package apart; a renamed-away `SCRIPT`) is a
/// clear error now instead of a failure at the first lock, and so is an ACL
/// rule without `script|load`. Any other error (a server still loading) is
/// left to the first operation, which reports it.
pub(crate) async fn preload<C: ConnectionLike>(con: &mut C, server: &str) -> Result<(), LockError> {
    let mut pipe = redis::pipe();
    for (_, _, source) in sources() {
        pipe.cmd("SCRIPT").arg("LOAD").arg(source);
    }
    match pipe.query_async::<Vec<String>>(con).await {
        Ok(_) => Ok(()),
        Err(e) => match without_lua(server, &e) {
            Some(refused) => Err(refused),
            // Loading works for one user only while another loaded the
            // scripts since the server started: say so now, not after the
            // next restart.
            None if e.kind() == redis::ErrorKind::Server(ServerErrorKind::NoPerm) => {
                Err(backend_error(server, e))
            }
            None => {
                tracing::debug!(server, error = %e, "leasehold: the scripts could not be loaded at connect; the first operation will try again");
                Ok(())
            }
        },
    }
}

/// The error for a server that answered `SCRIPT LOAD` with an unknown
/// command or no scripting engine: one that cannot run leasehold's scripts.
pub(crate) fn without_lua(server: &str, err: &RedisError) -> Option<LockError> {
    let text = err.to_string();
    let lacks = [
        "unknown command",
        "unknown subcommand",
        "scripting engine",
        "no engine",
    ]
    .iter()
    .any(|sign| text.contains(sign));
    lacks.then(|| {
        LockError::invalid(
            "server",
            format!(
                "{server} cannot run Lua scripts (`SCRIPT LOAD` answered: {text}); leasehold needs \
                 them for every lock operation: enable Lua on the server (on Valkey ≥ 9.1, load \
                 its Lua module or install the package that ships it)"
            ),
        )
    })
}

impl ScriptError {
    /// The precise [`LockError`], naming `server` (redacted) and the lock.
    pub(crate) fn into_lock_error(self, server: &str, keys: &LockKeys) -> LockError {
        match self {
            ScriptError::Redis(err) => script_backend_error(server, err).with_key(keys.key()),
            ScriptError::WrongType { redis_key } => LockError::WrongType {
                key: keys.key().to_owned(),
                redis_key,
            },
        }
    }
}

/// A failed script call as a [`LockError::Backend`]; an ACL refusal inside
/// the script is a [`LockError::Misconfigured`] naming the refused command.
pub(crate) fn script_backend_error(server: &str, err: RedisError) -> LockError {
    match refused_in_script(&err) {
        Some(message) => LockError::misconfigured(server, message),
        None => backend_error(server, err),
    }
}

/// Each script's name and source, to explain an error raised inside one.
fn sources() -> [(&'static str, &'static Script, &'static str); 17] {
    [
        ("keep_place", &keep_place::SCRIPT, keep_place::SOURCE),
        (
            "family_acquire",
            &family_acquire::SCRIPT,
            family_acquire::SOURCE,
        ),
        (
            "family_release",
            &family_release::SCRIPT,
            family_release::SOURCE,
        ),
        ("family_renew", &family_renew::SCRIPT, family_renew::SOURCE),
        (
            "family_abandon",
            &family_abandon::SCRIPT,
            family_abandon::SOURCE,
        ),
        ("lock_all", &lock_all::SCRIPT, lock_all::SOURCE),
        (
            "family_force_release",
            &family_force_release::SCRIPT,
            family_force_release::SOURCE,
        ),
        (
            "family_inspect",
            &family_inspect::SCRIPT,
            family_inspect::SOURCE,
        ),
        ("acquire", &acquire::SCRIPT, acquire::SOURCE),
        ("release", &release::SCRIPT, release::SOURCE),
        ("release_all", &release_all::SCRIPT, release_all::SOURCE),
        ("renew", &renew::SCRIPT, renew::SOURCE),
        ("record", &record::SCRIPT, record::SOURCE),
        ("abandon", &abandon::SCRIPT, abandon::SOURCE),
        ("raise_fence", &raise_fence::SCRIPT, raise_fence::SOURCE),
        ("inspect", &inspect::SCRIPT, inspect::SOURCE),
        (
            "force_release",
            &force_release::SCRIPT,
            force_release::SOURCE,
        ),
    ]
}

/// Redis refuses a command that a script calls (an ACL user without it)
/// without naming the command: "The user executing the script can't run
/// this command or subcommand script: <sha>, on @user_script:<line>." (Redis
/// 7; 6.2 says "call to f_<sha>" and "@user_script:<line>:"). Name it from
/// the script's source line, so that the operator knows what to allow.
fn refused_in_script(err: &RedisError) -> Option<String> {
    let text = err.to_string();
    // Valkey 9 says "ACL failure in script: User <u> has no permissions to
    // run the '<command>' command script: on @user_script:<line>." (no SHA).
    if !text.contains("user executing the script can't") && !text.contains("ACL failure in script")
    {
        return None;
    }
    let sha = ["call to f_", "script: "].iter().find_map(|marker| {
        text.match_indices(marker).find_map(|(at, _)| {
            let start = at + marker.len();
            text.get(start..start + 40)
                .filter(|sha| sha.bytes().all(|b| b.is_ascii_hexdigit()))
        })
    });
    let line: usize = text
        .match_indices("@user_script:")
        .find_map(|(at, marker)| {
            let rest = text[at + marker.len()..].trim_start();
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            digits.parse().ok()
        })?;
    let named = text
        .split_once("run the '")
        .and_then(|(_, rest)| rest.split_once('\''))
        .map(|(command, _)| command);
    let code_at = |source: &'static str| source.lines().nth(line.checked_sub(1)?).map(str::trim);
    // The script by its SHA; without one, the script whose line calls the
    // command the server named.
    let (name, code) = sources().into_iter().find_map(|(name, script, source)| {
        let code = code_at(source)?;
        let found = match (sha, named) {
            (Some(sha), _) => script.get_hash() == sha,
            (None, Some(command)) => code
                .to_ascii_lowercase()
                .contains(&format!("'{}'", command.to_ascii_lowercase())),
            (None, None) => false,
        };
        found.then_some((name, code))
    })?;
    // `typed(..)` raises with "(command X)"; `redis.call('X', ..)` is on the line.
    let command = text
        .split_once("(command ")
        .and_then(|(_, rest)| rest.split_once(')'))
        .map(|(command, _)| command)
        .or(named)
        .or_else(|| {
            code.split_once("call('")
                .and_then(|(_, rest)| rest.split_once('\''))
                .map(|(command, _)| command)
        });
    let what = if text.contains("publish to the channel") {
        "publishing to the lock's channel (allow `&<prefix>*`, `&leasehold:*` by default)"
            .to_owned()
    } else {
        match command {
            Some(command) => format!("command `{command}`"),
            None => "a command".to_owned(),
        }
    };
    Some(format!(
        "{ACL_REFUSED}: {what}, called by leasehold's {name} script (line {line}: `{code}`); \
         see the minimal ACL rule in docs/topologies.md (TLS and ACL users). Redis said: {text}"
    ))
}
