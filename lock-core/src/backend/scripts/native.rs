//! The native twins of `release.lua` and `renew.lua`: conditional commands
//! some servers offer, one atomic command each (a check-then-act as atomic
//! as the script's), cheaper
//! than an `EVALSHA` (COSTS.md: 0.6–0.7 µs of server time against 2.3–2.7
//! µs on Valkey 9.1).
//!
//! | server | release (delete if ours) | renew (new expiry if ours) |
//! | --- | --- | --- |
//! | Valkey ≥ 9.0 | `DELIFEQ key token` | `SET key token IFEQ token PX ms` |
//! | Valkey ≥ 8.1 | — | `SET key token IFEQ token PX ms` |
//! | Redis ≥ 8.4 | `DELEX key IFEQ token` | `SET key token IFEQ token PX ms` |
//!
//! They only handle the plain case, with the caller's token exactly as
//! stored: the key holds the token without the line marker (nobody waits in
//! line, so a release announces nothing) and the command does all the Lua
//! twin would. Anything else — a marked token, a key that is not ours, a
//! force-released lease (renew.lua's -2), a value of another type — makes
//! the native command do nothing ("not equal") or fail without effect
//! (`WRONGTYPE`), and the caller then sends the Lua twin, which is atomic
//! on its own and answers for the key's state at its time. Both are safe to
//! send twice, so a retry after a lost reply gives what the Lua twin gives.
//!
//! Which commands a server offers is read from `INFO server` at every
//! identity check (connect, reconnect, failover) as [`Natives`] and kept in
//! [`Offered`]; a command the server refuses anyway (an ACL rule without
//! it, a rename) is dropped for the rest of the client's life.

use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

use redis::aio::ConnectionLike;
use redis::{ErrorKind, RedisError, ServerErrorKind, Value};

use super::call::ScriptError;
use crate::backend::LockKeys;
use crate::backend::connect::{is_retryable, millis};

/// Native conditional commands a server offers (a set of flags).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Natives(u8);

impl Natives {
    /// None: every operation is a Lua script.
    pub(crate) const NONE: Natives = Natives(0);
    /// `DELIFEQ key value` (Valkey ≥ 9.0).
    pub(crate) const DELIFEQ: Natives = Natives(1);
    /// `DELEX key IFEQ value` (Redis ≥ 8.4).
    pub(crate) const DELEX: Natives = Natives(2);
    /// `SET key value IFEQ old …` (Valkey ≥ 8.1, Redis ≥ 8.4).
    pub(crate) const SET_IFEQ: Natives = Natives(4);
    /// `SET key value NX PX ms GET` (Redis ≥ 7.0, every Valkey): the fast
    /// acquisition (`fast.rs`) tells a taken lock from a wrong-typed key in
    /// its one command.
    pub(crate) const SET_NX_GET: Natives = Natives(8);
    /// `MULTI … EXEC` of the native `lock_all` (`lock_all_fast.rs`): with
    /// `SET … NX GET`, until the server refuses the transaction (an ACL
    /// rule without `MULTI` and `EXEC`).
    pub(crate) const MULTI_ALL: Natives = Natives(16);

    /// Whether every flag of `other` is in `self`.
    pub(crate) fn has(self, other: Natives) -> bool {
        self.0 & other.0 == other.0 && other.0 != 0
    }

    fn and(self, other: Natives) -> Natives {
        Natives(self.0 & other.0)
    }

    /// What one server's `INFO` (`server` section) says it offers, from its
    /// name and version: `server_name:valkey` with `valkey_version`, or
    /// Redis' `redis_version` (Valkey reports a frozen `redis_version:7.2.4`
    /// for compatibility, so the name comes first). Any other server (or a
    /// fork reporting another `*_version`) gets none.
    pub(crate) fn from_info(text: &str) -> Natives {
        let (mut name, mut redis, mut valkey, mut other_fork) = (None, None, None, false);
        for line in text.lines() {
            let Some((field, value)) = line.trim().split_once(':') else {
                continue;
            };
            match field {
                "server_name" => name = Some(value.trim()),
                "redis_version" => redis = version(value),
                "valkey_version" => valkey = version(value),
                "dragonfly_version" | "keydb_version" => other_fork = true,
                _ => {}
            }
        }
        match (name, valkey) {
            (Some("valkey"), Some(v)) | (None, Some(v)) => {
                let mut natives = Natives(Natives::SET_NX_GET.0 | Natives::MULTI_ALL.0);
                if v >= (8, 1) {
                    natives.0 |= Natives::SET_IFEQ.0;
                }
                if v >= (9, 0) {
                    natives.0 |= Natives::DELIFEQ.0;
                }
                natives
            }
            (None | Some("redis"), None) if !other_fork => match redis {
                Some(v) if v >= (8, 4) => Natives(
                    Natives::DELEX.0
                        | Natives::SET_IFEQ.0
                        | Natives::SET_NX_GET.0
                        | Natives::MULTI_ALL.0,
                ),
                Some(v) if v >= (7, 0) => Natives(Natives::SET_NX_GET.0 | Natives::MULTI_ALL.0),
                _ => Natives::NONE,
            },
            _ => Natives::NONE,
        }
    }

    /// What every server of `texts` offers (Cluster: one `INFO` per node;
    /// a mixed cluster gets only what all of its nodes have). `None` when
    /// no text names a version (not an `INFO server` reply).
    pub(crate) fn common(texts: &[String]) -> Option<Natives> {
        texts
            .iter()
            .filter(|text| text.contains("redis_version:") || text.contains("valkey_version:"))
            .map(|text| Natives::from_info(text))
            .reduce(Natives::and)
    }
}

/// `major.minor` of a version string.
fn version(value: &str) -> Option<(u32, u32)> {
    let mut parts = value.trim().split('.').map(|p| p.parse::<u32>().ok());
    Some((parts.next()??, parts.next().flatten().unwrap_or(0)))
}

/// What a server offers now, as this client knows it: set at every
/// identity check, minus what the server refused.
#[derive(Debug, Default)]
pub(crate) struct Offered {
    seen: AtomicU8,
    refused: AtomicU8,
}

impl Offered {
    /// The commands to use now.
    pub(crate) fn get(&self) -> Natives {
        Natives(self.seen.load(Ordering::Acquire) & !self.refused.load(Ordering::Acquire))
    }

    /// Whether plain commands, pipelined, may stand in for a script where
    /// they can (the fast acquisition, a family release, grant records):
    /// the server has `SET … NX GET` (Redis ≥ 7, every Valkey) and natives
    /// are not turned off.
    pub(crate) fn fast_path(&self) -> bool {
        self.get().has(Natives::SET_NX_GET)
    }

    /// Whether a release may go as a native conditional delete
    /// (`DELIFEQ`, `DELEX … IFEQ`): then a `lock_all`'s keys are released
    /// one native command each, not by `release_all.lua`.
    pub(crate) fn deletes(&self) -> bool {
        let natives = self.get();
        natives.has(Natives::DELIFEQ) || natives.has(Natives::DELEX)
    }

    /// The server (as its `INFO` says) offers `natives`.
    pub(crate) fn learn(&self, natives: Natives) {
        self.seen.store(natives.0, Ordering::Release);
    }

    /// The server refused `native` (unknown to it after all, or not allowed
    /// to this user): the Lua twin serves from now on.
    pub(crate) fn refuse(&self, native: Natives) {
        self.refused.fetch_or(native.0, Ordering::AcqRel);
    }
}

/// What a native command did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Native {
    /// Done: everything the Lua twin would have done.
    Done,
    /// Nothing changed (not the plain case, or the command is not usable):
    /// send the Lua twin.
    Twin,
}

/// The release in one native command, if `offered` has one: `DELIFEQ` or
/// `DELEX … IFEQ` of the plain token. Only for a release that deletes now
/// and announces only to the line (which a plain token says is empty).
pub(crate) async fn release<C: ConnectionLike>(
    con: &mut C,
    offered: &Offered,
    keys: &LockKeys,
    token: &str,
) -> Result<Native, ScriptError> {
    let natives = offered.get();
    let (cmd, used) = if natives.has(Natives::DELIFEQ) {
        let mut cmd = redis::cmd("DELIFEQ");
        cmd.arg(keys.lock()).arg(token);
        (cmd, Natives::DELIFEQ)
    } else if natives.has(Natives::DELEX) {
        let mut cmd = redis::cmd("DELEX");
        cmd.arg(keys.lock()).arg("IFEQ").arg(token);
        (cmd, Natives::DELEX)
    } else {
        return Ok(Native::Twin);
    };
    match cmd.query_async::<Value>(con).await {
        Ok(Value::Int(1)) => Ok(Native::Done),
        Ok(_) => Ok(Native::Twin),
        Err(e) => twin_after(offered, used, e),
    }
}

/// One lease's renewal in one native command, if `offered` has it: `SET
/// key token IFEQ token PX ttl` (the value stays the same).
pub(crate) async fn renew<C: ConnectionLike>(
    con: &mut C,
    offered: &Offered,
    lock: &str,
    token: &str,
    ttl: Duration,
) -> Result<Native, ScriptError> {
    if !offered.get().has(Natives::SET_IFEQ) {
        return Ok(Native::Twin);
    }
    let mut cmd = redis::cmd("SET");
    cmd.arg(lock)
        .arg(token)
        .arg("IFEQ")
        .arg(token)
        .arg("PX")
        .arg(millis(ttl));
    match cmd.query_async::<Value>(con).await {
        Ok(Value::Okay) => Ok(Native::Done),
        Ok(Value::SimpleString(ok)) if ok == "OK" => Ok(Native::Done),
        Ok(_) => Ok(Native::Twin),
        Err(e) => twin_after(offered, Natives::SET_IFEQ, e),
    }
}

/// After a native command failed: a broken connection or a server asking
/// to retry is the caller's to handle (both commands are safe to resend);
/// anything else changed nothing, and the Lua twin answers. A refusal that
/// will not go away (unknown command, ACL, syntax) drops the command.
fn twin_after(offered: &Offered, used: Natives, err: RedisError) -> Result<Native, ScriptError> {
    if is_retryable(&err) || err.is_timeout() {
        return Err(ScriptError::Redis(err));
    }
    // `ERR unknown command`, `ERR syntax error`, `NOPERM`; not `WRONGTYPE`
    // (the key's business, the twin reports it) nor `OOM`, `READONLY`.
    if matches!(
        err.kind(),
        ErrorKind::Server(ServerErrorKind::NoPerm | ServerErrorKind::ResponseError)
    ) {
        tracing::debug!(error = %err, "leasehold: the server refused a native command; its Lua twin serves from now on");
        offered.refuse(used);
    }
    Ok(Native::Twin)
}

#[cfg(test)]
mod tests {
    use super::*;

    const VALKEY_9: &str =
        "# Server\r\nredis_version:7.2.4\r\nserver_name:valkey\r\nvalkey_version:9.1.2\r\n";
    const VALKEY_81: &str =
        "# Server\r\nredis_version:7.2.4\r\nserver_name:valkey\r\nvalkey_version:8.1.8\r\n";
    const VALKEY_80: &str =
        "# Server\r\nredis_version:7.2.4\r\nserver_name:valkey\r\nvalkey_version:8.0.2\r\n";
    const REDIS_84: &str = "# Server\r\nredis_version:8.4.0\r\n";
    const REDIS_82: &str = "# Server\r\nredis_version:8.2.3\r\n";
    const REDIS_70: &str = "# Server\r\nredis_version:7.0.15\r\nrun_id:x\r\n";
    const DRAGONFLY: &str = "# Server\r\nredis_version:7.4.0\r\ndragonfly_version:df-v1.30\r\n";

    #[test]
    fn the_choice_follows_the_server_name_and_version() {
        let set = |n: Natives| n.has(Natives::SET_IFEQ);
        let fast = Natives::SET_NX_GET.0 | Natives::MULTI_ALL.0;
        assert_eq!(
            Natives::from_info(VALKEY_9),
            Natives(Natives::DELIFEQ.0 | Natives::SET_IFEQ.0 | fast)
        );
        assert_eq!(
            Natives::from_info(VALKEY_81),
            Natives(Natives::SET_IFEQ.0 | fast)
        );
        assert_eq!(Natives::from_info(VALKEY_80), Natives(fast));
        assert_eq!(
            Natives::from_info(REDIS_84),
            Natives(Natives::DELEX.0 | Natives::SET_IFEQ.0 | fast)
        );
        assert!(set(Natives::from_info(REDIS_84)));
        assert_eq!(Natives::from_info(REDIS_82), Natives(fast));
        assert_eq!(Natives::from_info(REDIS_70), Natives(fast));
        assert_eq!(
            Natives::from_info("# Server\r\nredis_version:6.2.14\r\n"),
            Natives::NONE
        );
        assert_eq!(Natives::from_info(DRAGONFLY), Natives::NONE);
        assert!(!Natives::NONE.has(Natives::NONE));
    }

    #[test]
    fn a_cluster_gets_what_all_its_nodes_offer() {
        let texts = |t: &[&str]| t.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        assert_eq!(
            Natives::common(&texts(&[VALKEY_9, VALKEY_81])),
            Some(Natives(
                Natives::SET_IFEQ.0 | Natives::SET_NX_GET.0 | Natives::MULTI_ALL.0
            ))
        );
        assert_eq!(
            Natives::common(&texts(&[VALKEY_9, REDIS_70])),
            Some(Natives(Natives::SET_NX_GET.0 | Natives::MULTI_ALL.0))
        );
        assert_eq!(
            Natives::common(&texts(&["# Memory\r\nused_memory:1\r\n"])),
            None
        );
    }

    #[test]
    fn a_refused_command_stays_off_across_checks() {
        let offered = Offered::default();
        offered.learn(Natives::from_info(VALKEY_9));
        offered.refuse(Natives::DELIFEQ);
        offered.learn(Natives::from_info(VALKEY_9));
        assert_eq!(
            offered.get(),
            Natives(Natives::SET_IFEQ.0 | Natives::SET_NX_GET.0 | Natives::MULTI_ALL.0)
        );
    }
}
